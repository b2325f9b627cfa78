"""The type stubs and the compiled module describe the same API, and every call says what it
does in ``help()``."""

import ast
import inspect
import pathlib

import parma
import parma._parma as native

STUB = pathlib.Path(parma.__file__).with_name("_parma.pyi")
# Aliases the stub defines for its own signatures; not names of the module.
STUB_ONLY = {"Keys", "Values", "Init", "StrPath"}
DUNDERS = {"__enter__", "__exit__", "__init__"}


def stub_tree():
    assert STUB.is_file(), f"the wheel ships no stub at {STUB}"
    return ast.parse(STUB.read_text())


def stub_names():
    """Top-level names and, per class, its member names, as the stub declares them."""
    top, members = set(), {}
    for node in stub_tree().body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, ast.Assign):
            top.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return top - STUB_ONLY, members


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_stub_declares_exactly_the_modules_names():
    top, _ = stub_names()
    module = public(dir(native))
    assert top == module, f"only in the stub: {sorted(top - module)}; only in the module: {sorted(module - top)}"


def test_stub_declares_exactly_each_classs_members():
    _, members = stub_names()
    for name, declared in members.items():
        cls = getattr(native, name)
        actual = public(vars(cls))
        stubbed = public(declared)
        assert stubbed == actual, (
            f"{name}: only in the stub: {sorted(stubbed - actual)}; only in the module: {sorted(actual - stubbed)}"
        )
        for dunder in DUNDERS & declared:
            assert hasattr(cls, dunder), f"the stub gives {name} a {dunder} the class lacks"


def test_every_public_call_has_a_docstring_in_the_module_and_the_stub():
    tree = stub_tree()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            assert ast.get_docstring(node), f"stub class {node.name} has no docstring"
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                    assert ast.get_docstring(m), f"stub {node.name}.{m.name} has no docstring"
        elif isinstance(node, ast.FunctionDef):
            assert ast.get_docstring(node), f"stub {node.name} has no docstring"
    for name in public(dir(native)):
        obj = getattr(native, name)
        if inspect.isclass(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
            for member, value in vars(obj).items():
                if not member.startswith("_"):
                    doc = getattr(value, "__doc__", None) or ""
                    assert doc.strip(), f"{name}.{member} has no docstring"
        elif callable(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def test_stub_signatures_match_the_compiled_ones():
    """Parameter names (and which take defaults) agree for every function and method that
    reports its signature."""
    tree = stub_tree()

    def params(fn):
        a = fn.args
        names = [p.arg for p in a.posonlyargs + a.args if p.arg != "self"]
        return names + [p.arg for p in a.kwonlyargs]

    def check(stub_fn, obj, label):
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return
        actual = [p for p in sig.parameters if p not in ("self", "$self", "$type")]
        assert params(stub_fn) == actual, f"{label}: stub {params(stub_fn)} vs module {actual}"

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            check(node, getattr(native, node.name), node.name)
        elif isinstance(node, ast.ClassDef):
            cls = getattr(native, node.name)
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                    if isinstance(vars(cls).get(m.name), property) or not callable(getattr(cls, m.name)):
                        continue
                    check(m, getattr(cls, m.name), f"{node.name}.{m.name}")
            if any(isinstance(m, ast.FunctionDef) and m.name == "__init__" for m in node.body):
                init = next(m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "__init__")
                sig = cls.__text_signature__
                assert sig, f"{node.name} reports no constructor signature"
                check(init, cls, f"{node.name}()")


def test_package_reexports_the_module():
    for name in public(dir(native)):
        assert getattr(parma, name) is getattr(native, name)
    assert set(parma.__all__) >= public(dir(native))
    assert (pathlib.Path(parma.__file__).parent / "py.typed").is_file()
