# lit configuration for md. Puts md's tools and LLVM's FileCheck/not/count
# first on PATH, and turns optional parts into lit features (REQUIRES: cuda).
import os
import sys
import lit.formats

config.name = "md"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".mdl", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.md_obj_root, "test", "lit")

path = os.pathsep.join([config.md_tools_dir, config.llvm_tools_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path

config.substitutions.append(("%md_src_root", config.md_src_root))
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%md_obj_root", config.md_obj_root))

if config.md_enable_cuda:
    config.available_features.add("cuda")
