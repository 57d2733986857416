"""`make demo`: the payroll batch run end to end against the reference server.

The batch command (issue: payroll batches) is not built yet, so this says what the demo
will do and does nothing else.
"""

STEPS = """\
make demo will:
  1. start the reference server on a free 127.0.0.1 port;
  2. inject faults: 503 and 429 with Retry-After, apply-then-drop, slow responses,
     an external-system timeout;
  3. submit examples/payroll.csv with `idemclient batch submit`, kill it part way,
     and run the same command again;
  4. print the per-row report and the server's ledger: every row applied exactly once.

Not available yet: the batch command has not landed. Nothing was run."""

if __name__ == "__main__":
    print(STEPS)
