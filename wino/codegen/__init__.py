"""Code generation: stage specs -> kernel sources per target (Jinja2 templates + one renderer
class per target). Imports no compiler; the build (wino.builder) compiles what this renders."""
