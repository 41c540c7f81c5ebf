"""The query engines over the store.

DuckDB (:mod:`.db`: views from the shipped ``sql/``), the read-only sandbox with its limits, the DuckDB catalog
file, and Spark with its SQL translation and guard. Imports ``core`` and ``store``.
"""
