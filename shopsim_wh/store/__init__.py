"""The warehouse on disk or S3.

Storage backends, Hive-partitioned Parquet tables behind snapshots and an append-only ledger, compaction,
maintenance (runs list, vacuum) and the run lock. Imports only ``core``.
"""
