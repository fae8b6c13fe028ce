"""This process's kvroom runtime, shared by the serving-stack adapters
(kvroom.sglang, kvroom.vllm): one networked runtime per process, made on
first use; its directory (a bootstrap registry it publishes or joins, or
etcd); and the ranks it closes before the interpreter tears down."""

import atexit
import logging
import os
import weakref

from . import Runtime

logger = logging.getLogger("kvroom")

_state = {"runtime": None, "registry": None, "secret": None, "closables": weakref.WeakSet()}


def _close_at_exit():
    """Every rank of this process closes before Python tears itself down
    (a normal return, ``sys.exit``, or a SIGTERM handler that exits): each
    joins the threads and actors it started while the interpreter is whole,
    instead of leaving them to the order of interpreter and C++ teardown."""
    for x in list(_state["closables"]):
        try:
            x.close()
        except Exception:  # an exit path never raises for kvroom
            logger.debug("kvroom: closing a rank at exit failed", exc_info=True)


def close_at_exit(x):
    """``x.close()`` runs at exit unless ``x`` is gone by then."""
    _state["closables"].add(x)


def runtime(secret_file):
    """The process's runtime; every caller names the same secret file.
    ``KVROOM_LOG_LEVEL`` (trace, debug, info, warn, error; default warn;
    any case, so Python's WARNING too) sets its log level; another name is
    a ValueError here, at the first rank, not a level silently kept."""
    if _state["runtime"] is None:
        _state["runtime"] = Runtime(network=True, secret_file=secret_file or "",
                                    log_level=os.environ.get("KVROOM_LOG_LEVEL", "warn"))
        _state["secret"] = secret_file
        atexit.register(_close_at_exit)
    elif (secret_file or None) != (_state["secret"] or None):
        raise ValueError("kvroom: this process's runtime uses another secret file")
    return _state["runtime"]


def directory():
    """``KVROOM_DIRECTORY=etcd://host:port[,...]``: the deployment's
    directory on etcd instead of a bootstrap registry (deployments of
    hundreds of ranks); ``KVROOM_DIRECTORY_PREFIX`` names the deployment,
    ``KVROOM_LEASE_TTL_MS`` the lease."""
    return os.environ.get("KVROOM_DIRECTORY") or None


def use_etcd(rt, url, prefix, lease_ttl_ms, timeout_ms):
    """This process's ranks keep their entries on etcd at ``url``."""
    if _state["registry"] is None:
        rt.use_directory(url, prefix=prefix, lease_ttl_ms=lease_ttl_ms,
                         timeout_ms=max(timeout_ms, 10000))
        _state["registry"] = ("etcd", url)
    elif _state["registry"] != ("etcd", url):
        raise ValueError(f"kvroom: this process's directory is {_state['registry']}, not {url}")


def join_registry(rt, host, port, timeout_ms=30000):
    """This process's ranks register with the registry at host:port: the one
    it publishes itself (``publish_registry``), or one it connects to once;
    or, with KVROOM_DIRECTORY, with the directory on etcd."""
    if directory():
        use_etcd(rt, directory(), os.environ.get("KVROOM_DIRECTORY_PREFIX", "/kvroom/default"),
                 int(os.environ.get("KVROOM_LEASE_TTL_MS", "5000")), timeout_ms)
        return
    where = (host, int(port))
    if _state["registry"] is None:
        rt.connect_registry(host, int(port), timeout_ms)
        _state["registry"] = where
    elif _state["registry"][1] != where[1]:
        raise ValueError(f"kvroom: this process joined the registry at {_state['registry']}, "
                         f"not {where}")


def publish_registry(rt, host, port):
    """This process serves the deployment's bootstrap registry at host:port
    (port 0: any); returns the port. Nothing to serve with etcd."""
    if directory():
        return int(port)
    port = rt.publish_registry(int(port), host)
    _state["registry"] = (host, port)
    return port
