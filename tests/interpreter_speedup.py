"""Make Triton's CPU interpreter skip work it repeats, for the test suite only.

Triton's interpreter (``TRITON_INTERPRET=1``) patches ``triton.language`` with its NumPy builtins when a
kernel is launched, and again on *every call of a ``@triton.jit`` helper* inside that kernel, although
the launch has already patched the same modules. Each re-patch walks the modules with
``inspect.getmembers`` (about 2 ms), and our sliding kernels call helpers thousands of times per
launch: 40 % of an interpreted colour guided filter was spent there. The interpreter also checks every
32-bit integer add, sub and mul for overflow (what ``debug=True`` does on a GPU) by redoing it in 64
bits: half of what was left. Interpreted tests use images of 128 x 128 or less, whose indices are
far from 2**31, and the kernels form 64-bit offsets where large images need them.

``install()`` turns that overflow check off, looks NumPy types up in a table built once (the interpreter builds
its dict on every call), and wraps ``triton.runtime.interpreter._patch_lang`` so that a helper call made while a launch
has already patched every ``triton.language`` module the helper sees does nothing; anything else (a
launch, or a helper whose module imports a language module the launch did not patch) is patched as
before. Results are unchanged: the skipped patch would have installed the same functions. If Triton's
interpreter changes shape, ``install()`` does nothing and the tests run at the old speed.
"""
import dataclasses
import inspect


class _Covered:
    """The scope of a helper call whose modules the enclosing launch has patched: nothing to undo."""

    def restore(self):
        pass


def install():
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except Exception:  # no Triton, or an interpreter without this layout
        return False
    original = getattr(interpreter, "_patch_lang", None)
    if original is None or getattr(original, "_vision_covered", False):
        return False
    langs_of = {}
    patched = []  # the module ids patched by the launch now running (at most one: launches do not nest)

    def langs(fn):
        key = id(fn)
        if key not in langs_of:
            langs_of[key] = frozenset(id(v) for v in fn.__globals__.values()
                                      if inspect.ismodule(v) and (v is tl or v is tl.core))
        return langs_of[key]

    def patch_lang(fn):
        mine = langs(fn)
        if patched and mine <= patched[-1]:
            return _Covered()
        scope = original(fn)
        if patched:  # a helper that sees a module the launch did not patch: it stays patched, as upstream
            patched[-1] = patched[-1] | mine
            return scope
        patched.append(mine)
        restore = scope.restore

        def end_of_launch():
            patched.clear()
            restore()

        scope.restore = end_of_launch
        return scope

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is not None and getattr(options, "sanitize_overflow", False):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    patch_lang._vision_covered = True
    interpreter._patch_lang = patch_lang
    _table_np_dtype(interpreter, tl)
    return True


def _table_np_dtype(interpreter, tl) -> None:
    """``_get_np_dtype`` builds its dict of Triton-to-NumPy types on every call (a tenth of an interpreted colour
    guided filter): look each scalar type up once. Pointers and blocks are unwrapped exactly as it does."""
    original = getattr(interpreter, "_get_np_dtype", None)
    if original is None or getattr(original, "_vision_table", False):
        return
    pointer = getattr(tl, "pointer_type", None)
    block = getattr(tl, "block_type", None)
    if pointer is None or block is None:
        return
    table = {}

    def get_np_dtype(tt_dtype):
        if isinstance(tt_dtype, block) and not isinstance(tt_dtype, pointer):
            if isinstance(tt_dtype.element_ty, pointer):
                return original(tt_dtype)
            tt_dtype = tt_dtype.element_ty
        if isinstance(tt_dtype, pointer):
            return original(tt_dtype)
        try:
            return table[tt_dtype]
        except KeyError:
            table[tt_dtype] = found = original(tt_dtype)
            return found

    get_np_dtype._vision_table = True
    interpreter._get_np_dtype = get_np_dtype
