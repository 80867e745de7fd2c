"""The event table's schema columns read as attributes (events.Events) give what the columns hold, on every
table make_events and its row selections make."""

import numpy as np
import pytest

from distprof import events as ev


def _table() -> ev.Events:
    return ev.make_events(kind=ev.RANGE, category=ev.PHASE, name=np.array(["b", "a", "c"], object),
                          start_ns=np.array([30, 10, 20]), end_ns=np.array([40, 15, 25]), step=np.array([1, 0, 1]))


def test_every_schema_column_is_an_attribute_equal_to_the_column():
    table = _table()
    for name in ev.COLUMNS:  # the attribute is the column itself, not a copy
        assert getattr(table, name) is table[name]
    assert table.start_ns.tolist() == [10, 20, 30]  # rows by start, as make_events sorts them
    assert table.name.values().tolist() == ["a", "c", "b"] and table.step.tolist() == [0, 1, 1]


def test_selections_stay_event_tables_and_a_misspelt_column_fails_where_read():
    table = _table()
    later = table.take(table.start_ns >= 20)
    assert isinstance(later, ev.Events) and later.end_ns.tolist() == [25, 40]
    assert isinstance(table.with_columns(step=np.array([5, 5, 5])), ev.Events)
    with pytest.raises(AttributeError):
        table.start  # noqa: B018 - the read is the test
