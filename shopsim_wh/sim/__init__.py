"""Embedded ShopSimulator environment: the real ``shop_env`` wire format, the pi-slime dialect, a fair policy.

Public API::

    create_app(seed=0, capacity=20, policy=PolicyConfig(), show_attrs=False)
    serve(host="127.0.0.1", port=8765, seed=0, **create_app_kwargs)
    load_default_split_manifest() / default_split_manifest_path()
    generate_catalog(seed) / generate_tasks(seed) / generate_split_manifest(seed)
    Episode(task, seed, slot, interaction_mode)  # the transport-free session
    purchase_reward(...) / empty_reward_detail(reason)  # the real reward formulas
"""

from shopsim_wh.sim.catalog import generate_catalog
from shopsim_wh.sim.engine import (
    DEFAULT_ACTION_LIMIT,
    ENVIRONMENT_VERSION,
    EPISODE_LIMITS,
    Episode,
    EpisodeDone,
)
from shopsim_wh.sim.observation import OBSERVATION_VERSION
from shopsim_wh.sim.policy import FAILURE_KINDS, PROFILES, PolicyConfig, PolicyProfile
from shopsim_wh.sim.reward import PRIMARY_REWARD, REWARD_VERSION, empty_reward_detail, purchase_reward
from shopsim_wh.sim.server import SimApp, create_app, serve
from shopsim_wh.sim.tasks import (
    default_split_manifest_path,
    generate_split_manifest,
    generate_tasks,
    load_default_split_manifest,
)

__all__ = [
    "DEFAULT_ACTION_LIMIT",
    "ENVIRONMENT_VERSION",
    "EPISODE_LIMITS",
    "FAILURE_KINDS",
    "OBSERVATION_VERSION",
    "PRIMARY_REWARD",
    "PROFILES",
    "REWARD_VERSION",
    "Episode",
    "EpisodeDone",
    "PolicyConfig",
    "PolicyProfile",
    "SimApp",
    "create_app",
    "default_split_manifest_path",
    "empty_reward_detail",
    "generate_catalog",
    "generate_split_manifest",
    "generate_tasks",
    "load_default_split_manifest",
    "purchase_reward",
    "serve",
]
