"""The Ray cluster a run's sharded voters live on (`backends.executor: {name: ray}`).

`ray_session` joins the cluster the config names, or starts one of the run's own: bound to
127.0.0.1 (Ray otherwise listens on the machine's network address), with no dashboard, with
object spilling off unless the config opts in, and with the workers' output kept out of the
driver's log. Whatever it started or joined it leaves when the run ends, so the actors that
hold private embeddings die with the run. A process that already runs Ray (a test, a notebook)
keeps its connection.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from dpsynth.backends.config import ExecutorConfig
from dpsynth.errors import ConfigError

log = logging.getLogger(__name__)

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray reads it at import (and its processes at start): "0" binds a cluster started here to
127.0.0.1, where Ray would otherwise listen on the machine's network address."""


def import_ray(loopback: bool = False):
    """Ray; with `loopback`, set so that a cluster this process starts listens on 127.0.0.1
    only, even when Ray was imported before."""
    if loopback:
        os.environ[LOOPBACK_ENV] = "0"
    try:
        import ray
        from ray._private import ray_constants
    except ImportError:
        raise ConfigError("backends.executor.name: ray needs Ray: pip install 'dpsynth[dist]'"
                          ) from None
    if loopback:
        ray_constants.ENABLE_RAY_CLUSTER = False
    return ray


def init_options(cfg: ExecutorConfig) -> dict[str, object]:
    """`ray.init` arguments for the config: a cluster of the run's own, or the named one."""
    options: dict[str, object] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
    if cfg.address is not None:
        return {"address": cfg.address, **options}
    spilling: dict[str, object] = {"automatic_object_spilling_enabled": False}
    if cfg.allow_object_spilling:
        spilling = {"object_spilling_config": json.dumps(
            {"type": "filesystem", "params": {"directory_path": str(cfg.spill_dir)}})}
    return {"num_cpus": max(1, round(cfg.workers * cfg.cpus_per_worker)),
            "_system_config": spilling, **options}


@contextmanager
def ray_session(cfg: ExecutorConfig) -> Iterator[None]:
    """Connected to Ray for the block when the executor is ray; nothing otherwise."""
    if cfg.name != "ray":
        yield
        return
    ray = import_ray(loopback=cfg.address is None)
    if ray.is_initialized():
        yield
        return
    ray.init(**init_options(cfg))
    where = ray.get_runtime_context().gcs_address
    if cfg.address is None and not where.startswith("127.0.0.1:"):
        ray.shutdown()
        raise ConfigError(f"backends.executor: the cluster dpsynth started listens on {where}, "
                          "not on 127.0.0.1 only; start one yourself and set its address")
    log.info("ray: %s", "a cluster of this run's own on 127.0.0.1" if cfg.address is None
             else f"joined {cfg.address}")
    try:
        yield
    finally:
        ray.shutdown()
