"""kvroom as a vLLM KV connector (``KVConnectorBase_V1``), loaded without
a change to vLLM::

    --kv-transfer-config '{"kv_connector": "KvroomConnector",
                           "kv_connector_module_path": "kvroom.vllm",
                           "kv_role": "kv_producer",        # or kv_consumer, kv_both
                           "kv_connector_extra_config": {"registry": "10.0.0.1:8998"}}'

or, with the ``vllm.general_plugins`` entry point this package installs,
``"kv_connector": "KvroomConnector"`` alone.

Each request moves as one kvroom bootstrap room, pushed by the prefill
(``scheduler_side`` says how vLLM's calls map onto rooms; ``worker_side``
how the worker's ranks carry them out). The room protocol gives vLLM what
its connector contract asks, and more: a prefill holds a finished request's
blocks until decode confirmed every byte or the hold expired, never frees
them under a write; a failed load is reported as load errors on every block
of the request in the pass that returns it, after which no byte of it lands
(``kv_load_failure_policy`` ``recompute`` and ``fail`` both work); a decode
request aborted while it loads is aborted everywhere, and its blocks are
freed once nothing can land in them.

``kv_connector_extra_config`` (each optional):
- ``registry``: ``host:port`` of the deployment's kvroom bootstrap registry
  (default ``127.0.0.1:8998``); ``serve_registry``: true on the one instance
  whose first worker serves it; ``directory``: ``etcd://host:port[,...]``
  instead (``directory_prefix``, ``lease_ttl_ms``);
- ``instance``: this vLLM instance's index among its side's (0, 1, ... in
  a xPyD deployment; with ``kv_both``, among every instance): each is its
  own kvroom DP group (default 0; a second instance on 0 is refused at
  start-up, naming this key);
- ``secret_file``: the deployment secret (else ``KVROOM_SECRET_FILE``);
- ``transport``: ``auto`` (default), ``tcp``, ``shm``, ``verbs``, ``cuda``;
  ``host``: this worker's data-plane address(es);
- ``hold_ms``: how long a prefill holds a finished request's blocks for its
  decode (default 480000, vLLM's NIXL abort timeout); ``wait_ms``: how long
  a decode waits for a room's prefill to show up (default 60000), after
  which the load fails;
- ``integrity``: ``off`` or ``xxh3``;
- ``pull`` (the consumer's): true to read the producer's blocks instead of
  the producer writing them (NixlConnector's direction). The producer
  grants each request's blocks to the reading decode rank and its hold is
  the read lease: once it expires no block of it is read again.

- ``layerwise`` (the producer's): true to send each layer's K and V as the
  forward pass computes it (``save_kv_layer``) instead of the whole request
  after it. It pays where decode's destination is there during the pass (a
  proxy that names the room and sends the request to both at once); in the
  usual order the layers wait in the room for it.
- Loads are asynchronous by default: a request runs once every layer of it
  landed.
- ``layer_load`` (the consumer's): true to load synchronously, layer by
  layer: a request runs in the step its blocks were allocated, and each
  layer's attention waits only for that layer's K and V
  (``wait_for_layer_load``), so the first layers compute while the later
  ones move. Meant for the proxy order (prefill first, then decode): the
  engine's pass waits for the load, so a decode that asks before its
  prefill computed stalls its engine until it did. ``layer_wait_ms``
  (default 30000) bounds the wait for one layer: the load is then aborted,
  and fails (``recompute`` or ``fail``) once nothing of it can land.

Not yet: vLLM's hybrid KV cache manager (the factory asks for
``--disable-hybrid-kv-cache-manager``).
"""

__all__ = ["KvroomConnector", "KvroomConnectorMetadata", "register"]


def __getattr__(name):
    # vLLM's factory imports this package and takes the class by name: the
    # connector (and vLLM with it) is imported then, so the plain modules
    # (scheduler_side, worker_side) import without vLLM.
    if name in ("KvroomConnector", "KvroomConnectorMetadata"):
        from . import connector
        return getattr(connector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register():
    """vLLM's ``vllm.general_plugins`` entry point: ``"kv_connector":
    "KvroomConnector"`` without a module path."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    if "KvroomConnector" not in getattr(KVConnectorFactory, "_registry", {}):
        KVConnectorFactory.register_connector("KvroomConnector", "kvroom.vllm",
                                              "KvroomConnector")
