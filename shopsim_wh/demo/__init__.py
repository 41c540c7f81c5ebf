"""Generators of demo and benchmark data: synthetic shop and coding warehouses, ShopSimRL v4 run directories and
reasoning traces. The product never imports this package; only the CLI's ``demo`` and ``synth`` commands, the
tests and ``bench/`` do (``tests/test_import_graph.py`` holds it).
"""
