"""The DuckDB -> Spark translator on single statements (no Spark session needed: the SQL text is checked)."""

import pytest

from shopsim_wh.engines.spark_sql import Translator


def test_ordered_first_becomes_min_by_or_max_by():
    assert Translator().query("SELECT first(v ORDER BY k) FROM t") == "SELECT MIN_BY(v, k) FROM t"
    assert Translator().query("SELECT first(v ORDER BY k DESC) FROM t") == "SELECT MAX_BY(v, k) FROM t"


def test_ordered_first_with_two_keys_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="2 sort keys has no Spark form.*order by one key"):
        Translator().query("SELECT first(v ORDER BY k1, k2) FROM t")
