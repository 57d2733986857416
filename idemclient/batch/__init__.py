"""Batch payouts: a file of rows, each paid exactly once however often it is submitted.

batch = read_batch("payroll-2026-11.csv")
with Client(base_url=..., headers=..., store="idemclient.db") as client:
    report = submit(batch, client, concurrency=8)
report.write("report.csv")
"""

from .._errors import BatchInvalid
from ._progress_counts import BatchProgress
from ._report import ExitCode, Report, ReportRow
from ._rows import AmountFormat, Batch, PayoutRow, read_batch
from ._run import asubmit, submit

__all__ = [
    "AmountFormat",
    "Batch",
    "BatchInvalid",
    "BatchProgress",
    "ExitCode",
    "PayoutRow",
    "Report",
    "ReportRow",
    "asubmit",
    "read_batch",
    "submit",
]
