"""The result cache's table (`function_results`) on PostgreSQL: only better entries replace
stored ones, placeholders never replace measured entries, versions purge."""

from __future__ import annotations

import pytest
from sqlalchemy import delete

from tasmopt.report import CachedFunction
from tasmopt.store import (
    FunctionResult,
    count_function_results,
    delete_function_result,
    get_function_results,
    purge_function_results,
    put_function_result,
    record_cache_hits,
    update_as_returned,
)


@pytest.fixture()
def session(pg_session):
    pg_session.execute(delete(FunctionResult))
    pg_session.commit()
    yield pg_session
    pg_session.rollback()
    pg_session.execute(delete(FunctionResult))
    pg_session.commit()


def _entry(cycles: int, *, final: bool = False, lines=("    push 1",), measured: bool = True):
    return CachedFunction(
        key="k" * 64,
        name="f",
        lines=list(lines) if lines is not None else None,
        report={"cycles": cycles, "name": "f"},
        final=final,
        budget_s=0.5,
        source="search",
        measured=measured,
    )


def _put(session, entry, version="v1"):
    out = put_function_result(session, entry=entry, verifier_version=version)
    session.commit()
    return out


def test_only_a_better_entry_replaces_the_stored_one(session):
    assert _put(session, _entry(10)) == "inserted"
    assert _put(session, _entry(12)) == "kept"  # worse
    assert _put(session, _entry(10)) == "kept"  # same, not final
    assert _put(session, _entry(12, final=True)) == "finalized"  # worse but final: kept, final
    got = get_function_results(session, keys=["k" * 64])["k" * 64]
    assert got.cycles == 10 and got.final
    assert _put(session, _entry(9, final=True, lines=("    push 2",))) == "improved"
    got = get_function_results(session, keys=["k" * 64, "absent"])
    assert list(got) == ["k" * 64] and got["k" * 64].lines == ["    push 2"]


def test_as_returned_costs_are_written_back_only_onto_the_lines_they_were_measured_on(session):
    assert _put(session, _entry(10)) == "inserted"
    again = {"closure": "c" * 64, "cycles": 14}
    # another program stored since (or a placeholder): the measurement is not its own
    assert not update_as_returned(session, key="k" * 64, lines=["    push 2"], as_returned=again)
    assert not update_as_returned(session, key="absent", lines=["    push 1"], as_returned=again)
    assert update_as_returned(session, key="k" * 64, lines=["    push 1"], as_returned=again)
    session.commit()
    got = get_function_results(session, keys=["k" * 64])["k" * 64]
    assert got.report == {"cycles": 10, "name": "f", "as_returned": again}  # own costs kept
    assert got.cycles == 10


def test_a_placeholder_is_replaced_by_any_measurement_and_never_replaces_one(session):
    assert _put(session, _entry(0, lines=None, measured=False)) == "inserted"
    got = get_function_results(session, keys=["k" * 64])["k" * 64]
    assert not got.measured and got.cycles == -1 and got.lines is None
    assert _put(session, _entry(50)) == "improved"  # any measured entry beats a placeholder
    assert _put(session, _entry(0, lines=None, measured=False)) == "kept"
    assert get_function_results(session, keys=["k" * 64])["k" * 64].cycles == 50


def test_counts_hits_deletes_and_purges_by_verifier_version(session):
    _put(session, _entry(10), version="old")
    record_cache_hits(session, keys=["k" * 64])
    session.commit()
    assert session.get(FunctionResult, "k" * 64).hits == 1
    assert count_function_results(session) == 1 and count_function_results(session, final=True) == 0
    assert purge_function_results(session, keep_verifier_version="old") == 0
    assert purge_function_results(session, keep_verifier_version="new") == 1
    session.commit()
    assert count_function_results(session) == 0
    _put(session, _entry(10))
    assert delete_function_result(session, key="k" * 64) and not delete_function_result(
        session, key="k" * 64
    )
