"""The scanner sees through what grep cannot (zstd Parquet pages, gzip, zstd, \\u-escaped JSON): negative controls."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq

from shopsim_wh.testing.scan import scan_bytes, scan_paths

CANARY = "sk-canary-0123456789abcdef"


def test_finds_a_canary_hidden_in_every_encoding(tmp_path):
    near = CANARY[:-1] + "Z"  # a near miss first: zstd then stores the canary as a back-reference
    t = pa.table({"a": [near * 3] * 25 + ["x" + CANARY] * 25, "nested": [[{"k": near}]] * 49 + [[{"k": CANARY}]],
                  "ok": ["fine"] * 50})
    (tmp_path / "episodes" / "run_id=r").mkdir(parents=True)
    pq.write_table(t, tmp_path / "episodes" / "run_id=r" / "p.parquet", compression="zstd")
    (tmp_path / "e.json.gz").write_bytes(gzip.compress(('{"m": "' + CANARY.replace("c", "\\u0063") + '"}').encode()))
    (tmp_path / "u.json").write_text(json.dumps({"m": "é" + CANARY}, ensure_ascii=True))
    with pa.output_stream(str(tmp_path / "z.log.zst"), compression="zstd") as out:
        out.write(b"Traceback ... " + CANARY.encode())
    hits = scan_paths([tmp_path], [CANARY])
    wheres = {(h.path.rsplit("/", 1)[-1], h.where) for h in hits}
    assert ("p.parquet", "a") in wheres and ("p.parquet", "nested.k") in wheres
    assert any(p.startswith("u.json") for p, _ in wheres) and any(p.startswith("z.log.zst") for p, _ in wheres)
    assert any(p.startswith("e.json.gz") and w == "$.m" for p, w in wheres)
    # an allowed (outcome) column is not a hit; other columns still are
    allowed = scan_paths([tmp_path / "episodes"], [CANARY], allow={"episodes.a"})
    assert {h.where for h in allowed} == {"nested.k"}
    assert scan_bytes(b"nothing here", "x", [CANARY]) == []
