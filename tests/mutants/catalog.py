"""The mutants: plausible one- to three-line bugs at the client's decision points, each
described by the behaviour it breaks.

`killers` are the smallest set of behavioural tests (pytest node ids) found to kill
the mutant, run by `make mutants`; `make mutants FULL=1` runs the wide set instead
(`run.WIDE`). A killer is never a unit test of the mutated function: it goes through
`Client`, `AsyncClient`, `wrap()`, `resume()`, the batch, or the checker's histories,
against the reference server (or a scripted transport), and looks at what was paid and
what the caller was told.

When the code a mutant is anchored in moves, move the anchor with it: the behaviour it
breaks says what to look for. Keep each mutant a real bug, not a rename.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    #: a short name, as the table prints it
    name: str
    #: the decision point it is at (as the issue that asked for the suite lists them)
    point: str
    #: what goes wrong for users, in words
    breaks: str
    #: the file, from the tree's root
    path: str
    #: the exact code it changes: found exactly once in `path`
    anchor: str
    #: what it becomes
    replacement: str
    #: the behavioural tests that kill it (pytest node ids, from the tree's root)
    killers: tuple[str, ...]


CLASSIFY = "idemclient/_classify.py"
CALL = "idemclient/_call.py"
TELLING = "idemclient/_telling.py"
TIME = "idemclient/_time.py"
HISTORIES = "tests/checker/test_histories.py"
BOUNDARIES = "tests/integration/test_time_boundaries.py"
WRITE_BEHIND = "tests/client/test_write_behind.py"
LATE_SUCCESS = "tests/client/test_late_success.py"
WRITE_BEHIND_QUEUE = "idemclient/_worker.py"
LOST_THEN_DOWN = HISTORIES + "::test_an_attempt_applied_then_its_answer_lost_is_never_told_not_sent"

MUTANTS: tuple[Mutant, ...] = (
    # -- classification of each status and error class ----------------------------------
    Mutant(
        "timeout-read-as-not-sent",
        "classification",
        "a read timeout (the request sent, its answer never read) is taken as never sent:"
        " a call whose later attempts do not reach the server tells NotSent for a payment"
        " the server made",
        CLASSIFY,
        "    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):",
        "    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout"
        " | httpx.ReadTimeout):",
        (LOST_THEN_DOWN + "[network down-read timeout]",),
    ),
    Mutant(
        "dropped-connection-read-as-not-sent",
        "classification",
        "a connection the server closed without an answer is taken as never sent",
        CLASSIFY,
        "    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):",
        "    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout"
        " | httpx.RemoteProtocolError):",
        (LOST_THEN_DOWN + "[network down-dropped by the server]",),
    ),
    Mutant(
        "5xx-not-maybe-applied",
        "classification",
        "a 500, 502 or 504 is taken as never applied: a call that ends after one tells"
        " NotSent, a refusal after one is final",
        CLASSIFY,
        "        _row(AttemptKind.SERVER_ERROR, retry=True, maybe_applied=True),",
        "        _row(AttemptKind.SERVER_ERROR, retry=True, maybe_applied=False),",
        (LOST_THEN_DOWN + "[network down-502]",),
    ),
    Mutant(
        "202-read-as-success",
        "classification",
        "a 202 Accepted (the payment pending at the server, its outcome unknown) is taken"
        " as its final success: the caller is told succeeded for a payment not made yet",
        CLASSIFY,
        "    elif status == 202:\n        kind = AttemptKind.ACCEPTED",
        "    elif status == 202:\n        return _BY_KIND[AttemptKind.SUCCEEDED]",
        (HISTORIES + "::test_a_payment_accepted_and_still_pending_is_never_told_succeeded",),
    ),
    Mutant(
        "409-in-progress-read-as-refusal",
        "classification",
        "a 409 'still running' is taken as a refusal: the caller is told failed while the"
        " server runs the payment",
        CLASSIFY,
        "    if any(m.matches(status, headers, codes) for m in profile.in_progress):\n"
        "        return AttemptKind.IN_PROGRESS, True",
        "    if any(m.matches(status, headers, codes) for m in profile.in_progress):\n"
        "        return AttemptKind.REJECTED, True",
        (HISTORIES + "::test_a_payment_still_running_is_never_told_failed",),
    ),
    Mutant(
        "refusal-after-maybe-applied-final",
        "classification",
        "a 4xx after an attempt that may have been applied is taken as the payment's final"
        " answer at a server that does not replay: told failed for a payment made",
        CLASSIFY,
        "    if server_replays and status not in EDGE_REFUSALS:\n        return found\n"
        "    return Classification(found.kind, retry=False, maybe_applied=True, final=False)",
        "    return found",
        (HISTORIES + "::test_checkout_a_refusal_after_a_503_is_not_told_failed",),
    ),
    Mutant(
        "edge-refusal-final-at-a-replaying-server",
        "classification",
        "a 403 or 404 that a firewall or CDN gives, after an attempt that may have been"
        " applied, is taken as a replaying server's stored answer: told failed",
        CLASSIFY,
        "    if server_replays and status not in EDGE_REFUSALS:",
        "    if server_replays:",
        (
            HISTORIES
            + "::test_an_edge_refusal_after_an_applied_attempt_is_never_told_failed[reference]",
        ),
    ),
    # -- key adoption on re-issue ---------------------------------------------------------
    Mutant(
        "reissue-under-a-new-key",
        "key adoption",
        "an operation issued again sends the key its new call drew, not the one recorded:"
        " paid twice",
        CALL,
        "            self.request.headers[slot.header] = slot.header_value(record.key)",
        "            self.request.headers[slot.header] = slot.header_value("
        "self.intent.key if self.intent is not None else record.key)",
        (
            HISTORIES
            + "::test_an_operation_issued_again_after_its_answer_was_lost_pays_once[reference]",
        ),
    ),
    Mutant(
        "reissue-forgets-maybe-applied",
        "key adoption",
        "an operation issued again forgets that an earlier attempt may have been applied:"
        " sent again past the key retention, after a clock step, past a refusal",
        CALL,
        "        self.maybe_applied = record.maybe_applied\n",
        "        self.maybe_applied = False\n",
        (BOUNDARIES + "::test_key_retention[after-host ahead]",),
    ),
    # -- fingerprint comparison -----------------------------------------------------------
    Mutant(
        "another-body-is-the-same-request",
        "fingerprint comparison",
        "an operation issued again with another body is taken as the same request: sent"
        " under the first one's key (the server refuses it 422, or pays the new body)",
        "idemclient/_store/_rows.py",
        "    if is_current(record.fingerprint):\n        return False  # one rule, two meanings",
        "    if is_current(record.fingerprint):\n        return True",
        (
            HISTORIES + "::test_an_operation_issued_again_with_another_body_is_refused_and_"
            "nothing_sent[client-reference]",
        ),
    ),
    # -- durability of the intent commit --------------------------------------------------
    Mutant(
        "intent-not-flushed",
        "intent durability",
        "the intent is committed without a flush to disk before the first byte is sent: a"
        " power loss then forgets the key of a payment the server may hold",
        "idemclient/_store/_sqlite.py",
        "        durable = self.durability is not Durability.BUFFERED\n        lock = self._lock\n",
        "        durable = False\n        lock = self._lock\n",
        ("tests/integration/test_intent_flushed.py",),
    ),
    # -- lease takeover -------------------------------------------------------------------
    Mutant(
        "live-lease-taken-over-early",
        "lease takeover",
        "another process's lease is taken over two seconds before it ends: two senders",
        "idemclient/_time.py",
        "    return expires is not None and expires > now\n",
        "    return expires is not None and expires > now + 2.0\n",
        (BOUNDARIES + "::test_lease_expiry[before-host ahead]",),
    ),
    Mutant(
        "dead-owner-waited-on",
        "lease takeover",
        "the lease of a process that has exited is waited on until it ends, as if alive:"
        " a restart waits out the dead owner's whole deadline before it sends",
        "idemclient/_store/_base.py",
        "    return not owner_is_dead(holder)\n",
        "    return True\n",
        ("tests/client/test_ownership.py",),
    ),
    Mutant(
        "second-final-answer-told-as-the-first",
        "lease takeover",
        "a caller paused past its lease, whose own final answer (a refusal in front of the"
        " server) comes after another caller's success, is told 'succeeded' with the"
        " refusal's body: the application reads a payment that is not there",
        "idemclient/_flow.py",
        "    if record.lease_lost:\n        # Another caller finished it first",
        "    if False:\n        # Another caller finished it first",
        (
            "tests/client/test_ownership.py::"
            "test_an_owner_paused_past_its_lease_returns_what_another_finished",
            HISTORIES + "::test_stripe_a_paused_caller_s_late_refusal_is_not_told_as_the_success",
        ),
    ),
    Mutant(
        "late-success-loses-to-a-stored-refusal",
        "lease takeover",
        "a caller paused past its lease, whose own request paid after the caller that took"
        " over stored a refusal, is told 'failed', and the store keeps the refusal for a"
        " payment made",
        "idemclient/_store/_guards.py",
        "    return f\"(state = '{State.FAILED.value}' AND coalesce(status_code, 0) NOT BETWEEN"
        ' 200 AND 299)"',
        '    return "false"',
        (
            LATE_SUCCESS
            + "::test_a_paused_caller_s_own_late_success_wins_over_a_refusal_stored_meanwhile",
            HISTORIES + "::test_ietf_a_paused_caller_s_late_success_after_a_stored_refusal"
            "_is_not_told_failed",
        ),
    ),
    Mutant(
        "late-attempt-settled-by-a-stored-refusal",
        "lease takeover",
        "a caller paused past its lease, whose own attempt sent after the caller that took"
        " over stored a refusal may have been applied (its answer lost, or pending), is"
        " told 'failed', and the store keeps the refusal, never resumed nor looked up",
        "idemclient/_store/_guards.py",
        '        f" AND ({sent} AND maybe_applied OR coalesce({sent_at}, -1) >= finished_at))"',
        '        f" AND ({sent} AND false OR coalesce({sent_at}, -1) < -2))"',
        (
            LATE_SUCCESS
            + "::test_a_paused_caller_s_own_late_attempt_unsettles_a_refusal_stored_meanwhile",
            HISTORIES
            + "::test_ietf_a_paused_caller_s_late_pending_attempt_unsettles_a_stored_refusal",
        ),
    ),
    Mutant(
        "refusal-while-maybe-applied-covers-an-earlier-answer",
        "lease takeover",
        "a caller paused past its lease, whose request paid and whose answer it read as lost"
        " before the caller that took over stored a refusal, and wrote after it, is told"
        " 'failed', and the store keeps the refusal for a payment made",
        "idemclient/_store/_guards.py",
        '        f" AND ({sent} AND maybe_applied OR coalesce({sent_at}, -1) >= finished_at))"',
        '        f" AND ({sent} AND false OR coalesce({sent_at}, -1) >= finished_at))"',
        (
            "tests/client/hostile/test_state_table_attacks.py"
            "::test_an_answer_lost_before_a_refusal_stored_meanwhile_is_never_told_failed",
        ),
    ),
    Mutant(
        "refusal-judged-blind-lands",
        "lease takeover",
        "a caller paused past its lease before its request left, whose request is refused"
        " in front of the server after the caller that took over sent and lost its answer"
        " (maybe applied), is told 'failed', and the store keeps it for a payment made",
        "idemclient/_store/_guards.py",
        '        f"(({_sql_in(REFUSED_IN)} AND ({succeeded} OR maybe_applied = false OR {{p}}))"',
        '        f"(({_sql_in(REFUSED_IN)} AND ({succeeded} OR true OR {{p}}))"',
        (
            "tests/client/test_refusal_judged_blind.py::test_an_edge_refusal_after_a_takeover_s"
            "_maybe_applied_attempt_is_never_told_failed",
            HISTORIES + "::test_ietf_a_paused_caller_s_edge_refusal_after_a_takeover_s_lost_answer"
            "_is_not_failed",
        ),
    ),
    # -- the hold -------------------------------------------------------------------------
    Mutant(
        "no-in-flight-hold",
        "the hold",
        "under a server that does not guard a key in flight, a maybe-applied operation is"
        " sent again at once, beside the attempt the server may still run: paid twice",
        CALL,
        "        if self.profile.guards_in_flight:\n            return None\n"
        "        now = self.clock.time()\n        sent = now if since is None else since",
        "        if True:\n            return None\n"
        "        now = self.clock.time()\n        sent = now if since is None else since",
        (
            HISTORIES + "::test_a_resume_while_an_unguarded_server_holds_the_key_in_flight_"
            "pays_once[paypal-ADMITTED]",
        ),
    ),
    Mutant(
        "hold-without-the-skew",
        "the hold",
        "the in-flight hold (and a look-up's window) leaves out the hosts' clock skew:"
        " five minutes short",
        TIME,
        "    return sent + in_flight_for + CLOCK_SKEW",
        "    return sent + in_flight_for",
        (BOUNDARIES + "::test_in_flight_hold[before-host behind-paypal]",),
    ),
    Mutant(
        "hold-by-this-hosts-clock-alone",
        "the hold",
        "the in-flight hold is judged by this host's clock alone, not the server's Date"
        " too: a clock stepped forward while no client ran ends it early, paid twice",
        TIME,
        "    if server is None:\n        return until\n    held = until\n",
        "    if True:\n        return until\n    held = until\n",
        (
            HISTORIES + "::test_a_clock_stepped_forward_while_the_client_holds_a_maybe_"
            "applied_operation_pays_once[paypal-3600.0]",
        ),
    ),
    # -- retention margins and their signs ------------------------------------------------
    Mutant(
        "retention-margin-sign",
        "retention margin",
        "the key retention's margin for the clock skew has its sign flipped (age - skew):"
        " a maybe-applied payment re-issued within five minutes of the retention's end is"
        " sent to a server that may have forgotten its key",
        TIME,
        "    return age + CLOCK_SKEW <= retention",
        "    return age - CLOCK_SKEW <= retention",
        (BOUNDARIES + "::test_key_retention[after-host ahead]",),
    ),
    Mutant(
        "retention-judged-before-the-wait",
        "retention margin",
        "the key retention is judged at the time of the call, not at the time the send"
        " would go after its wait (a hold, a server's not-before)",
        TIME,
        "        age(stamped, now=now, server=server, server_stamped=server_stamped)"
        " + max(0.0, after),",
        "        age(stamped, now=now, server=server, server_stamped=server_stamped),",
        ("tests/client/hostile/test_lease_skew_attacks.py",),
    ),
    Mutant(
        "age-by-this-hosts-clock-alone",
        "retention margin",
        "an operation's age is read on this host's clock alone: a clock set back while no"
        " client ran makes a day-old payment look young, and it is sent after its key is"
        " gone",
        TIME,
        "    local = now - stamped\n    if server is None:\n        return local",
        "    local = now - stamped\n    if True:\n        return local",
        (
            "tests/integration/test_server_clock.py::test_a_clock_set_back_while_no_client_"
            "ran_is_seen_by_the_server_s_date[client]",
        ),
    ),
    Mutant(
        "stamp-before-the-watch-trusted",
        "retention margin",
        "a stamp made before the client started watching its clock is judged as one made"
        " while it watched: by this host's clock alone, the server's `Date` never asked; a"
        " clock set back while no client ran makes a day-old payment look young to the"
        " client, the batch and a look-up's 'none', and it is sent after its key is gone",
        TIME,
        "    return since is not None and stamped >= since",
        "    return since is not None",
        (
            "tests/integration/test_server_clock.py::test_a_clock_set_back_while_no_client_"
            "ran_is_seen_by_the_server_s_date[client]",
            "tests/integration/test_server_clock.py::test_a_clock_set_back_while_no_client_"
            "ran_is_seen_by_the_server_s_date[batch]",
            "tests/client/hostile/test_server_stamp_attacks.py::test_a_wrong_date_at_the_send"
            "_does_not_make_a_look_up_s_none_believed[gateway-504-behind]",
        ),
    ),
    Mutant(
        "clock-step-allowance-doubled",
        "retention margin",
        "a clock that went back is noticed only past twice the allowed skew: a step of"
        " six minutes to ten leaves the store's maybe-applied payments of a wrong age",
        TIME,
        "    return step if step > CLOCK_SKEW else 0.0",
        "    return step if step > 2 * CLOCK_SKEW else 0.0",
        (BOUNDARIES + "::test_clock_step_allowance[after-at a start]",),
    ),
    Mutant(
        "late-send-left-out-of-the-store-clock",
        "retention margin",
        "a clock set back while no client ran, below an unfinished operation's later send"
        " but above its intent, goes unseen at the next start: the maybe-applied payment"
        " looks as young as its intent and is sent again after the server forgot its key",
        "idemclient/_store/_statements.py",
        '    " coalesce((SELECT max(sent_at) FROM {t}"',
        '    " coalesce((SELECT max(created_at) FROM {t}"',
        (
            "tests/client/test_a_late_send_shows_a_clock_step.py::test_a_clock_set_back_below_"
            "a_late_send_is_seen_and_nothing_is_paid_twice",
        ),
    ),
    Mutant(
        "running-clock-step-unseen",
        "retention margin",
        "a client whose clock goes back while it runs notices only a step of twice the"
        " allowed skew",
        "idemclient/_clock.py",
        "        return behind if behind > self._tolerance else 0.0",
        "        return behind if behind > 2 * self._tolerance else 0.0",
        (BOUNDARIES + "::test_clock_step_allowance[after-while running]",),
    ),
    # -- look-up judgements ---------------------------------------------------------------
    Mutant(
        "look-up-none-believed-at-once",
        "look-up judgement",
        "a look-up that finds nothing right after a send says 'never applied', while the"
        " server may still run the request: settled not sent, paid by the server later",
        TIME,
        "    if asked >= until and over_by_server(",
        "    if True or asked >= until and over_by_server(",
        (
            "tests/integration/test_early_look_up.py::test_a_payment_the_server_finishes_"
            "after_an_early_look_up_is_paid_once",
        ),
    ),
    Mutant(
        "look-up-declined-read-as-paid",
        "look-up judgement",
        "a look-up that finds the payment declined settles it succeeded",
        "idemclient/_reconcile/judgement.py",
        '        "declined": State.FAILED,',
        '        "declined": State.SUCCEEDED,',
        (
            HISTORIES + "::test_a_declined_payment_found_by_a_look_up_is_never_told_"
            "succeeded[generic-client]",
        ),
    ),
    # -- the batch's identity and look-up planning ----------------------------------------
    Mutant(
        "batch-key-from-the-line-number",
        "batch identity",
        "a batch row's key is derived from its line number, not its reference: every"
        " one-row batch has the same key, and the next one is refused and never paid",
        "idemclient/batch/_identity.py",
        "        key=key_from_identity(reference, operation, namespace=namespace),",
        "        key=key_from_identity(str(row.number), operation, namespace=namespace),",
        (HISTORIES + "::test_two_one_row_batches_are_both_paid",),
    ),
    Mutant(
        "batch-unknown-row-not-looked-up",
        "batch look-up planning",
        "a row the store does not know (a new machine, a lost store) is sent without a"
        " look-up: paid twice once the server has forgotten its key",
        "idemclient/batch/_plan.py",
        "    if known is None and not legacy:\n        return _NEW_LOOKED_UP if look_up else _NEW",
        "    if known is None and not legacy:\n        return _NEW",
        (
            HISTORIES + "::test_a_batch_run_again_on_a_lost_store_finds_its_row_by_look_up"
            "[True-reference]",
        ),
    ),
    Mutant(
        "batch-plan-ages-by-this-hosts-clock-alone",
        "batch look-up planning",
        "a known row's age is planned on this host's clock alone though the server's"
        " `Date` told its time: a host clock set back while nothing ran makes a row"
        " registered two days ago look new, and it is sent under a key the server forgot"
        " after another machine paid it",
        "idemclient/batch/_plan.py",
        "        return past_retention(record, now=now, retention=retention,"
        " server=server_time(record))",
        "        return past_retention(record, now=now, retention=retention, server=None)",
        (
            "tests/batch/test_command.py::test_a_record_past_the_key_retention_is_looked_up_"
            "before_it_is_sent[2 days ago by the server's clock only]",
        ),
    ),
    Mutant(
        "none-by-an-uncarried-reference-believed",
        "look-up judgement",
        "a look-up's none by a reference= the request never carried settles the operation"
        " not_sent: issued again once the server has forgotten its key, it is paid twice",
        "idemclient/_reconcile/settling.py",
        '    if verdict.finding == "not_found" and uncarried is not None:',
        '    if verdict.finding == "not_found" and uncarried is None and False:',
        (
            "tests/client/test_reference_not_in_body.py::"
            "test_a_reference_the_request_never_carried_does_not_settle_it",
        ),
    ),
    Mutant(
        "resume-gives-one-origin-s-credentials-to-another",
        "resume",
        "a client's resume() sends another origin's unfinished operation (a second"
        " provider's sharing the store) there with this client's headers and auth: that"
        " host is given this client's secret",
        "idemclient/_resume.py",
        "                _check_own_origin(client, stored)",
        "                pass",
        (
            "tests/client/test_resume_credentials.py::"
            "test_resume_never_sends_one_origin_s_secret_to_another",
        ),
    ),
    Mutant(
        "batch-found-not-final-aged-by-this-hosts-clock",
        "batch look-up planning",
        "a row found on the server not final, recorded before the client watched its"
        " clock, is aged by this host's clock alone though the look-up's `Date` told the"
        " server's: two days old by the server's clock, minutes by a clock set back, it is"
        " sent under a key the server has forgotten (stopped only by the client's own"
        " judgement of its age), not left unsettled as found",
        "idemclient/batch/_recording.py",
        "            if server_at is None or settings.watched(record.created_at)",
        "            if server_at is None or True",
        (
            "tests/batch/test_command.py::test_a_row_found_not_final_two_days_old_by_the_"
            "server_s_clock_is_not_sent_again",
        ),
    ),
    Mutant(
        "kept-answer-young-by-this-hosts-clock",
        "batch look-up planning",
        'a kept "nothing found" is judged young by this host\'s clock from its stamp,'
        " not the server's too: kept without a `Date` and read by a host clock set back"
        " since, it is believed, and a row paid by hand meanwhile is paid again",
        TIME,
        "    return age(stamped, now=now, server=server) + CLOCK_SKEW < window",
        "    return now - stamped + CLOCK_SKEW < window",
        (
            "tests/batch/test_look_ups_kept.py::test_an_answer_kept_without_the_servers_time_"
            "is_judged_by_the_servers_clock_from_its_stamp",
        ),
    ),
    Mutant(
        "kept-answer-not-aged-on-the-servers-clock",
        "batch look-up planning",
        'a kept "nothing found" is not aged on the server\'s clock alone (its Date then'
        " and now): answers kept by a host clock running fast, read once it is set right,"
        " look minutes old after hours, and rows paid meanwhile are paid again",
        TIME,
        "        if server.high - server_stamped >= window:\n            return False",
        "        if False:\n            return False",
        (
            "tests/batch/test_look_ups_kept.py::test_answers_kept_by_a_clock_running_fast_are_"
            "judged_by_the_servers_time",
        ),
    ),
    # -- profile key placement ------------------------------------------------------------
    Mutant(
        "key-always-in-idempotency-key",
        "profile key placement",
        "the key goes in Idempotency-Key whatever header the profile's server reads: a"
        " PayPal or Checkout.com server sees no key, and a second send pays twice",
        CALL,
        "            self.request.headers[slot.header] = slot.header_value(record.key)",
        '            self.request.headers["Idempotency-Key"] = slot.header_value(record.key)',
        (HISTORIES + "::test_a_resume_once_the_unguarded_server_let_the_key_go_pays_once[paypal]",),
    ),
    Mutant(
        "body-key-not-the-recorded-one",
        "profile key placement",
        "an operation issued again by its id under a profile whose key is a body field"
        " gets a new key in its body, not the recorded one",
        "idemclient/_client_request.py",
        "    return records[0].key if records else None",
        "    return None",
        (HISTORIES + "::test_an_operation_issued_again_after_its_answer_was_lost_pays_once",),
    ),
    # -- deadline and Retry-After arithmetic ----------------------------------------------
    Mutant(
        "retry-after-not-a-floor",
        "Retry-After arithmetic",
        "the server's Retry-After is shortened by the backoff's jitter: retried early",
        "idemclient/_policy.py",
        "        wait = max(wait, server_wait)",
        "        wait = min(wait, server_wait)",
        ("tests/reliability/test_hostile_retry_after.py",),
    ),
    Mutant(
        "retry-after-date-sign",
        "Retry-After arithmetic",
        "a Retry-After HTTP-date is read the wrong way round: a date in the future is no"
        " wait at all",
        "idemclient/_retry_after.py",
        "        wait = when.timestamp() - now",
        "        wait = now - when.timestamp()",
        ("tests/reliability/test_hostile_retry_after.py",),
    ),
    Mutant(
        "sleeps-past-the-deadline",
        "deadline arithmetic",
        "a wait that does not fit the time left is slept anyway: the call outlives its"
        " deadline (and its lease)",
        "idemclient/_policy.py",
        "    if wait >= remaining:",
        "    if wait >= remaining + 3600.0:",
        ("tests/client/test_client.py::test_the_deadline_bounds_attempts_and_sleeps",),
    ),
    # -- a store that fails after the server answered -------------------------------------
    Mutant(
        "unrecorded-refusal-told-not-sent",
        "classification",
        "a refusal the store could not record (a full disk) is told as NotSent, 'nothing"
        " reached the server'",
        TELLING,
        "    reached = call.maybe_applied or call.last_status is not None",
        "    reached = call.maybe_applied",
        (HISTORIES + "::test_adyen_a_refusal_the_store_could_not_record_is_not_told_not_sent",),
    ),
    # -- the async client's answer written behind it -------------------------------------
    Mutant(
        "read-ahead-of-the-queued-answer",
        "write behind",
        "a store call the loop makes after a final answer's queued write does not wait for"
        " it: the same operation issued again finds it in flight under a call that has"
        " ended, takes it over and sends it again",
        WRITE_BEHIND_QUEUE,
        "            if job.after:\n                self._after(job.after)\n",
        "",
        (WRITE_BEHIND + "::test_the_next_call_under_the_same_operation_sees_the_answer_written",),
    ),
    Mutant(
        "owner-let-go-before-its-write",
        "write behind",
        "the call whose answer is still being written counts as ended in its own process: a"
        " sync client on the same store takes the operation over and sends it again",
        "idemclient/_store/_owners.py",
        "parsed.token != ours or (owner not in _live and owner not in _behind)",
        "parsed.token != ours or owner not in _live",
        (WRITE_BEHIND + "::test_a_sync_client_of_the_same_process_waits_for_the_queued_answer",),
    ),
    Mutant(
        "late-answer-queued-past-its-lease",
        "write behind",
        "a caller paused past its lease queues its own late refusal behind the answer and"
        " is told 'failed' while the store keeps another caller's success",
        "idemclient/_behind.py",
        "            or not lease_holds(known.lease_expires, progress.now + LEASE_MARGIN)\n",
        "",
        (
            WRITE_BEHIND
            + "::test_an_async_owner_paused_past_its_lease_is_told_what_another_finished",
        ),
    ),
    Mutant(
        "answer-not-kept-told-nobody",
        "write behind",
        "a queued answer's write that finds another caller's answer there first (its lease"
        " lapsed while it waited) keeps silent: its caller acts on a refusal the store"
        " replaced by a success",
        "idemclient/_behind.py",
        "            if kept != words:\n",
        "            if False:\n",
        (
            "tests/client/hostile/test_answer_behind_attacks.py"
            "::test_a_queued_answer_the_store_did_not_keep_is_not_silent",
        ),
    ),
)
