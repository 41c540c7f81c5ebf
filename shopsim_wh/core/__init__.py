"""What every layer shares, importing nothing of the package outside it.

The table schemas (:mod:`.schema`, declared once and versioned), errors and their exit codes' classes, names, the
run configuration and its ShopSimRL import, frozen splits, the protocol error codes, crash points and the atomic
file writes. Imports nothing from ``shopsim_wh`` outside ``core``.
"""
