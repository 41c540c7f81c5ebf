"""Whole-warehouse health: ``check`` (do the files and the ledger agree) and ``doctor`` (can this
machine run and query it). They read every layer below them and nothing above.
"""
