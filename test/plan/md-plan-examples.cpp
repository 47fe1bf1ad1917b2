//===- md-plan-examples.cpp - write the example plans to files ----------===//
//
//   md-plan-examples OUT_DIR
//
// Writes every plan of ExamplePlanFiles() and TrainingPlanFiles() as
// OUT_DIR/<name>.fb: the seed corpus of plan-load-fuzzer and the inputs of
// the mdrun tests.
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <string>

#include "test/plan/ExamplePlans.h"
#include "test/plan/TrainingPlans.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: md-plan-examples OUT_DIR\n");
    return 2;
  }
  auto files = md::plan::examples::ExamplePlanFiles();
  for (auto &file : md::plan::examples::TrainingPlanFiles())
    files.push_back(std::move(file));
  for (const auto &[name, bytes] : files) {
    std::string path = std::string(argv[1]) + "/" + name + ".fb";
    std::FILE *file = std::fopen(path.c_str(), "wb");
    if (!file ||
        std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() ||
        std::fclose(file) != 0) {
      std::fprintf(stderr, "md-plan-examples: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
