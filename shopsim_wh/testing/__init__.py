"""Test and soak tooling that ships with the library: a fault-injecting loopback proxy
(:mod:`.faultproxy`), loopback servers (:mod:`.servers`), a secret / private-goal scanner (:mod:`.scan`)
bad-input generators for the ingest readers (:mod:`.badinput`) and process faults (crash points, kills,
power loss: :mod:`.faults`). Nothing here is imported by the
warehouse itself."""
