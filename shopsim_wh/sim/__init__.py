"""Embedded ShopSimulator-like environment: synthetic shop, both HTTP dialects and a fair scripted policy.

Public API::

    create_app(seed=0, capacity=256, lease_ttl_s=600.0, default_action_limit=15, policy=PolicyConfig())
    serve(host="127.0.0.1", port=8765, seed=0, **create_app_kwargs)
    load_default_split_manifest() / default_split_manifest_path()
    generate_catalog(seed) / generate_tasks(seed) / generate_split_manifest(seed)
    Episode(task, seed, action_limit)  # the transport-free state machine
"""

from shopsim_wh.sim.catalog import generate_catalog
from shopsim_wh.sim.engine import DEFAULT_ACTION_LIMIT, OBSERVATION_VERSION, Episode, EpisodeDone
from shopsim_wh.sim.policy import FAILURE_KINDS, PROFILES, PolicyConfig, PolicyProfile
from shopsim_wh.sim.server import SimApp, create_app, serve
from shopsim_wh.sim.tasks import (
    default_split_manifest_path,
    generate_split_manifest,
    generate_tasks,
    load_default_split_manifest,
)

__all__ = [
    "DEFAULT_ACTION_LIMIT",
    "FAILURE_KINDS",
    "OBSERVATION_VERSION",
    "PROFILES",
    "Episode",
    "EpisodeDone",
    "PolicyConfig",
    "PolicyProfile",
    "SimApp",
    "create_app",
    "default_split_manifest_path",
    "generate_catalog",
    "generate_split_manifest",
    "generate_tasks",
    "load_default_split_manifest",
    "serve",
]
