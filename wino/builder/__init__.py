"""The build: toolchains, content-addressed binaries, manifests, doit tasks, golden hashes.

``dodo.py`` at the repository root is a table of contents over this package:
  toolchains    which compilers exist, their identity and flavor, the compile commands
  cache_writer  render -> source file -> binary (content-addressed) -> manifest (atomic)
  plan          the grid per target with every binary's path known before compiling
  tasks         the doit task dicts (picklable module-level actions, so `doit -n N` works)
  golden        the golden shard: rendered-source, PTX and LLVM IR hashes
  report        what the manifests say (spilling kernels)
The runtime never imports this package (AOT: no compiler at run time).
"""
