"""Layer 1, core: what every other layer shares and nothing of the package below it.

The table schemas (:mod:`.schema`, declared once and versioned), errors and their exit codes' classes, names, the
run configuration and its ShopSimRL import, frozen splits, the protocol error codes, crash points and the atomic
file writes. Imports nothing from ``shopsim_wh`` outside ``core``.
"""
