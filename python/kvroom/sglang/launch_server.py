"""SGLang's server with kvroom as a transfer backend:

    python3 -m kvroom.sglang.launch_server --model-path ... \
        --disaggregation-mode prefill --disaggregation-transfer-backend kvroom

takes SGLang's own arguments and runs SGLang's own ``launch_server``, after
``kvroom.sglang.register()``. The registration happens when this module is
imported, so SGLang's scheduler processes, which its ``spawn`` start method
begins by importing the parent's main module, have it too (and SGLang's
plugin loader registers kvroom there as well where the package's entry point
is installed).
"""

import os
import sys

from kvroom.sglang import register

register()


def main(argv=None):
    from sglang.launch_server import run_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    try:
        from sglang.srt.plugins import load_plugins
        load_plugins()
    except ImportError:  # an SGLang without the plugin framework
        pass
    register()  # after any plugin that rebuilt the backend table
    server_args = prepare_server_args(list(sys.argv[1:] if argv is None else argv))
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
