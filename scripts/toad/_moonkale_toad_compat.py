# Installed by scripts/install-test-peers.sh into the Toad venv, with a .pth
# file that imports it at start-up.
#
# Toad 0.6.20 says Requires-Python >=3.14 and relies on PEP 649 (annotations
# evaluated lazily). No registry this machine reaches has CPython 3.14, so
# on 3.12/3.13 compile toad's own modules as if each began with
# `from __future__ import annotations` (PEP 563): annotations become strings
# and are never evaluated at import. Its path search also takes
# concurrent.futures.InterpreterPoolExecutor (3.14), a ThreadPoolExecutor
# with the same arguments: below 3.14 it gets ThreadPoolExecutor. And
# toad.jsonrpc reads handlers' annotations with inspect.signature, which
# must then evaluate the strings in the handler's own module (eval_str), as
# 3.14 does.
import __future__
import concurrent.futures
import functools
import importlib.machinery
import inspect
import sys

_FLAGS = __future__.annotations.compiler_flag


class _Loader(importlib.machinery.SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):
        return compile(data, path, "exec", flags=_FLAGS, dont_inherit=True, optimize=_optimize)

    def exec_module(self, module):
        super().exec_module(module)
        if module.__name__ == "toad.jsonrpc":
            module.signature = functools.partial(inspect.signature, eval_str=True)


class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "toad" and not name.startswith("toad."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _Loader(spec.loader.name, spec.loader.path)
        return spec


if sys.version_info < (3, 14):
    sys.meta_path.insert(0, _Finder)
    concurrent.futures.InterpreterPoolExecutor = concurrent.futures.ThreadPoolExecutor
