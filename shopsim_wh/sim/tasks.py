"""Deterministic shopping tasks, personas and the frozen split manifest.

A task pairs a public part (``task_id``, ``instruction``, ``persona``) with a private ``goal`` that only the
server's reward function reads. ``goal.goal_signature`` is an opaque per-task token that appears in no public
text, so a scan of written files for it proves the private goal never leaked.

Task IDs are explicit and have holes (a seeded sample of a larger ID space): never derive them from a range.

The split manifest groups tasks with union-find over shared goal product, instruction text and persona, and
assigns whole groups to ``train`` / ``val`` / ``test`` (about 80/10/10). The split of seed 0 ships as
``shopsim_wh/sim/data/persona_splits.v1.json`` in ShopSimRL's ``shopsimrl-persona-splits-v1`` schema;
``embedded_persona_splits(0)`` reproduces it from ``generate_split_manifest(0)``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import pathlib
import random
from dataclasses import dataclass, field

from shopsim_wh.core.splits import (  # noqa: F401  (DEFAULT_SPLITS_FILE, default_split_manifest_path: re-exported)
    DEFAULT_SPLITS_FILE,
    default_split_manifest_path,
    dump_persona_splits,
    persona_splits_document,
)
from shopsim_wh.sim.catalog import Product, generate_catalog
from shopsim_wh.sim.vocab import FIRST_NAMES, OCCUPATIONS, PREFERENCES

N_TASKS = 4600
N_PERSONAS = 420
N_SHARDS = 210  # products and personas of one shard only ever meet each other
TASK_ID_SPACE = 60_000
SPLIT_VERSION = "shopsim-splits.v1"


@dataclass(frozen=True)
class Goal:
    asin: str
    category: str
    attributes: tuple[str, ...]
    options: dict[str, str]
    price_upper: float
    goal_signature: str

    def to_dict(self) -> dict:
        return {
            "asin": self.asin,
            "category": self.category,
            "attributes": list(self.attributes),
            "options": dict(self.options),
            "price_upper": self.price_upper,
            "goal_signature": self.goal_signature,
        }


@dataclass(frozen=True)
class Task:
    task_id: int
    instruction: str
    persona: str
    goal: Goal = field(repr=False)

    def public(self) -> dict:
        return {"task_id": self.task_id, "instruction": self.instruction, "persona": self.persona}


@dataclass(frozen=True)
class TaskSet:
    seed: int
    tasks: tuple[Task, ...]
    by_id: dict[int, Task]


@functools.lru_cache(maxsize=8)
def generate_personas(seed: int = 0) -> tuple[str, ...]:
    rng = random.Random(f"shopsim-personas:{seed}")
    combos = [(n, o, p) for n in FIRST_NAMES for o in OCCUPATIONS for p in PREFERENCES]
    out = []
    for name, occupation, pref in rng.sample(combos, N_PERSONAS):
        age = rng.randint(19, 78)
        out.append(f"{name}, {age}, {occupation}; {pref}.")
    return tuple(out)


def persona_profile(persona: str) -> dict:
    """The persona text (``"Maya, 34, nurse; prefers eco-friendly materials."``) as the server's persona object."""
    head, _, preference = persona.partition("; ")
    parts = [x.strip() for x in head.split(",")]
    name, age, occupation = (parts + ["", "", ""])[:3]
    return {"name": name, "age": int(age) if age.isdigit() else age, "occupation": occupation,
            "preference": preference.rstrip(".")}


def _join(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _price_upper(rng: random.Random, price: float) -> float:
    raw = price * rng.uniform(1.08, 1.9)
    step = 10 if raw >= 40 else 5 if raw >= 15 else 1
    return float(math.ceil(raw / step) * step)


def _options_phrase(rng: random.Random, options: dict[str, str]) -> str:
    if not options:
        return ""
    style = rng.randrange(3)
    items = list(options.items())
    if style == 0:
        return "with " + _join([f"{k}: {v}" for k, v in items])
    if style == 1:
        return "in " + _join([v if k in v else f"size {v}" if k == "size" else f"{v} {k}" for k, v in items])
    return "with the " + _join([f"{k} {v}" for k, v in items]) + (" options" if len(items) > 1 else " option")


_TEMPLATES = (
    "i'm looking for {a_attrs} {noun} {opts}, and price lower than {price} dollars",
    "i need {attrs} {noun} {opts}, and price lower than {price} dollars",
    "find me {a_noun} that is {attrs_and} {opts}, and price lower than {price} dollars",
    "i want to buy {attrs} {noun} {opts}, and price lower than {price} dollars",
    "show me {attrs} {category} {opts}, and price lower than {price} dollars",
)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _make_instruction(rng: random.Random, product: Product, attrs: list[str], options: dict[str, str],
                      price_upper: float) -> str:
    template = rng.choice(_TEMPLATES)
    attrs_text = " ".join(attrs)
    text = template.format(
        a_attrs=f"{_article(attrs_text)} {attrs_text}",
        attrs=attrs_text,
        attrs_and=_join(attrs),
        noun=product.noun,
        a_noun=f"{_article(product.noun)} {product.noun}",
        category=product.category,
        opts=_options_phrase(rng, options),
        price=f"{price_upper:.2f}",
    )
    return " ".join(text.split()).replace(" ,", ",")


@functools.lru_cache(maxsize=8)
def generate_tasks(seed: int = 0) -> TaskSet:
    """The ~4,600 tasks of ``seed`` (cached); sorted by their (non-contiguous) task IDs."""
    catalog = generate_catalog(seed)
    personas = generate_personas(seed)
    rng = random.Random(f"shopsim-tasks:{seed}")
    task_ids = sorted(rng.sample(range(1000, 1000 + TASK_ID_SPACE), N_TASKS))
    product_shard = list(range(len(catalog.products)))
    rng.shuffle(product_shard)
    personas_of_shard: dict[int, list[int]] = {}
    for j in range(len(personas)):
        personas_of_shard.setdefault(j % N_SHARDS, []).append(j)
    order = list(range(N_TASKS))
    rng.shuffle(order)  # task IDs are not in generation order either
    tasks: list[Task] = []
    for k in range(N_TASKS):
        task_id = task_ids[order[k]]
        product = catalog.products[rng.randrange(len(catalog.products))]
        persona = personas[rng.choice(personas_of_shard[product_shard[product.index] % N_SHARDS])]
        attrs = rng.sample(product.attributes, rng.choice((1, 2, 2, 3)))
        options = {
            kind: rng.choice(values) for kind, values in product.options.items() if rng.random() < 0.85
        }
        if product.options and not options:
            kind = rng.choice(list(product.options))
            options[kind] = rng.choice(product.options[kind])
        price_upper = _price_upper(rng, product.price)
        signature = "goalsig-" + hashlib.sha256(f"shopsim-goal:{seed}:{task_id}".encode()).hexdigest()[:16]
        goal = Goal(
            asin=product.asin,
            category=product.category,
            attributes=tuple(attrs),
            options=options,
            price_upper=price_upper,
            goal_signature=signature,
        )
        instruction = _make_instruction(rng, product, attrs, options, price_upper)
        tasks.append(Task(task_id=task_id, instruction=instruction, persona=persona, goal=goal))
    tasks.sort(key=lambda t: t.task_id)
    frozen = tuple(tasks)
    return TaskSet(seed=seed, tasks=frozen, by_id={t.task_id: t for t in frozen})


# ---------------------------------------------------------------------------------------------- splits


def task_groups(tasks: tuple[Task, ...] | list[Task]) -> list[list[int]]:
    """Union-find over tasks sharing a goal product, an instruction or a persona; groups of task IDs."""
    parent = list(range(len(tasks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_owner: dict[tuple[str, str], int] = {}
    for i, task in enumerate(tasks):
        for key in (("asin", task.goal.asin), ("instruction", task.instruction), ("persona", task.persona)):
            j = first_owner.setdefault(key, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = {}
    for i, task in enumerate(tasks):
        groups.setdefault(find(i), []).append(task.task_id)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def generate_split_manifest(seed: int = 0, val_frac: float = 0.1, test_frac: float = 0.1) -> dict:
    """Group-aware ~80/10/10 split of the tasks of ``seed``, in the seed runtime's manifest shape."""
    tasks = generate_tasks(seed).tasks
    groups = task_groups(tasks)
    random.Random(f"shopsim-splits:{seed}").shuffle(groups)
    total = len(tasks)
    val: list[int] = []
    test: list[int] = []
    train: list[int] = []
    for group in groups:
        if len(val) < val_frac * total:
            val.extend(group)
        elif len(test) < test_frac * total:
            test.extend(group)
        else:
            train.extend(group)
    return {"version": SPLIT_VERSION, "train": sorted(train), "val": sorted(val), "test": sorted(test)}


def dump_split_manifest(manifest: dict) -> str:
    """Stable text form of the flat manifest: one key per line, each ID list on one line."""
    lines = ["{", f'  "version": {json.dumps(manifest["version"])},']
    for i, name in enumerate(("train", "val", "test")):
        comma = "," if i < 2 else ""
        lines.append(f'  "{name}": {json.dumps(manifest[name])}{comma}')
    lines.append("}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the shipped split file (persona-splits-v1)

SPLIT_POLICY_VERSION = "shopsim-wh-embedded-linked-groups-v1"


def embedded_persona_splits(seed: int = 0) -> dict:
    """``generate_split_manifest(seed)`` as a ``shopsimrl-persona-splits-v1`` document (same task ids)."""
    flat = generate_split_manifest(seed)
    tasks = generate_tasks(seed).tasks
    split_of = {t: name for name in ("train", "val", "test") for t in flat[name]}
    groups: dict[str, list[list[int]]] = {"train": [], "val": [], "test": []}
    for group in task_groups(tasks):
        groups[split_of[group[0]]].append(group)
    policy = {"version": SPLIT_POLICY_VERSION, "seed": seed, "allocation_order": ["val", "test", "train"],
              "validation_fraction": 0.1, "test_fraction": 0.1, "group_keys": ["asin", "instruction", "persona"],
              "flat_manifest_version": flat["version"]}
    source = {"generator": "shopsim_wh.sim.tasks.generate_split_manifest", "catalog_seed": seed,
              "task_count": len(tasks), "id_semantics": "IDs are a seeded sample of a larger space; gaps are intentional"}
    return persona_splits_document(flat, persona=True, policy=policy, source=source, groups=groups)


def load_default_split_manifest() -> dict:
    """The shipped ``shopsimrl-persona-splits-v1`` document (``["splits"][name]["task_ids"]``)."""
    return json.loads(default_split_manifest_path().read_text(encoding="utf-8"))


def default_task_ids(split: str) -> list[int]:
    """Task ids of one split of the shipped manifest, in file order."""
    return list(load_default_split_manifest()["splits"][split]["task_ids"])


def write_default_split_manifest() -> pathlib.Path:
    """Regenerate the shipped file (seed 0). ``python -m shopsim_wh.sim write-splits`` calls this."""
    path = default_split_manifest_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_persona_splits(embedded_persona_splits(0)), encoding="utf-8")
    return path
