//===- VerifyOrder.cpp - verify program order and uniformity --------------===//
//
// Stage (b) of loading a plan, its last checks, over the block tree in
// program order: events recorded before they are waited on, buffers used
// only inside their liveness interval, and no collective or exit under a
// condition that varies between ranks (unless both arms of that `if` run the
// same collectives in the same order).
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SemanticVerifier.h"

#include <algorithm>
#include <utility>

namespace md::plan::detail {

absl::Status SemanticVerifier::checkProgramOrder() {
  recorded_.assign(numEvents_, false);
  stack_.clear();
  MD_RETURN_IF_ERROR(walk(plan_.step_block()));
  std::fill(recorded_.begin(), recorded_.end(), false);
  if (plan_.hooks_block() != -1)
    MD_RETURN_IF_ERROR(walk(plan_.hooks_block()));
  return absl::OkStatus();
}

absl::Status SemanticVerifier::walk(int32_t b) {
  const fb::Block *block = plan_.blocks()->Get(b);
  std::vector<int32_t> recordedHere;
  for (uint32_t i = 0; i < count(block->instructions()); ++i) {
    const fb::Instruction *inst = block->instructions()->Get(i);
    stack_.push_back({b, static_cast<int32_t>(i)});
    std::string path;
    auto pathOf = [&] {
      if (path.empty())
        path = absl::StrFormat("blocks[%d].instructions[%d]", b, i);
      return path;
    };
    for (uint32_t k = 0; k < count(inst->waits()); ++k) {
      int32_t e = inst->waits()->Get(k);
      if (!recorded_[e])
        return invalidf("%s.waits[%d]: event %d is waited on before any "
                        "instruction records it",
                        pathOf(), k, e);
    }
    MD_RETURN_IF_ERROR(checkLive(inst->inputs(), "inputs", pathOf));
    MD_RETURN_IF_ERROR(checkLive(inst->outputs(), "outputs", pathOf));
    for (uint32_t k = 0; k < count(inst->blocks()); ++k)
      MD_RETURN_IF_ERROR(walk(inst->blocks()->Get(k)));
    stack_.pop_back();
    if (inst->record() >= 0 && !recorded_[inst->record()]) {
      recorded_[inst->record()] = true;
      recordedHere.push_back(inst->record());
    }
  }
  for (int32_t e : recordedHere)
    recorded_[e] = false;
  return absl::OkStatus();
}

template <typename PathFn>
absl::Status
SemanticVerifier::checkLive(const flatbuffers::Vector<int32_t> *list,
                            const char *field, PathFn &pathOf) {
  for (uint32_t k = 0; k < count(list); ++k) {
    int32_t x = list->Get(k);
    const fb::Buffer *buffer = plan_.buffers()->Get(x);
    if (buffer->role() != fb::StateRole::None)
      continue;
    auto at = std::find_if(stack_.begin(), stack_.end(),
                           [&](const std::pair<int32_t, int32_t> &s) {
                             return s.first == buffer->block();
                           });
    if (at == stack_.end())
      return invalidf(
          "%s.%s[%d]: buffer %d ('%s') lives in blocks[%d], which does not "
          "contain this instruction",
          pathOf(), field, k, x, detail::printable(str(buffer->name())),
          buffer->block());
    if (at->second < buffer->first() || at->second > buffer->last())
      return invalidf("%s.%s[%d]: buffer %d ('%s') is used at instruction %d "
                      "of blocks[%d], "
                      "outside its liveness interval [%d, %d]",
                      pathOf(), field, k, x,
                      detail::printable(str(buffer->name())), at->second,
                      buffer->block(), buffer->first(), buffer->last());
  }
  return absl::OkStatus();
}

namespace {

/// Whether `inst` exchanges something with the other ranks or ends the
/// run: a collective, an exit, or a timed `every`, which broadcasts rank
/// 0's decision.
bool talks(const fb::Instruction &inst) {
  if (GetOpcodeInfo(inst.opcode())->is(kCollective) ||
      inst.opcode() == fb::Opcode::Exit)
    return true;
  return inst.opcode() == fb::Opcode::Every &&
         static_cast<fb::PeriodUnit>(inst.ints()->Get(1)) !=
             fb::PeriodUnit::Steps;
}

} // namespace

bool SemanticVerifier::communicates(int32_t b) const {
  for (const fb::Instruction *inst : *plan_.blocks()->Get(b)->instructions()) {
    if (talks(*inst))
      return true;
    for (uint32_t k = 0; k < count(inst->blocks()); ++k)
      if (communicates(inst->blocks()->Get(k)))
        return true;
  }
  return false;
}

bool SemanticVerifier::communication(
    int32_t b, std::vector<const fb::Instruction *> &out) const {
  for (const fb::Instruction *inst : *plan_.blocks()->Get(b)->instructions()) {
    if (talks(*inst))
      out.push_back(inst);
    for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
      int32_t child = inst->blocks()->Get(k);
      // An evaluation's body is part of what it exchanges; other nested
      // control is not compared.
      if (inst->opcode() == fb::Opcode::Evaluate) {
        if (!communication(child, out))
          return false;
      } else if (communicates(child)) {
        return false;
      }
    }
  }
  return true;
}

bool SemanticVerifier::armsCommunicateAlike(
    const fb::Instruction &ifInst) const {
  if (ifInst.opcode() != fb::Opcode::If || count(ifInst.blocks()) != 2)
    return false;
  std::vector<const fb::Instruction *> a, b;
  if (!communication(ifInst.blocks()->Get(0), a) ||
      !communication(ifInst.blocks()->Get(1), b) || a.size() != b.size() ||
      a.empty())
    return false;
  auto sameBuffers = [&](const flatbuffers::Vector<int32_t> *x,
                         const flatbuffers::Vector<int32_t> *y) {
    if (count(x) != count(y))
      return false;
    for (uint32_t k = 0; k < count(x); ++k) {
      const fb::Buffer *p = plan_.buffers()->Get(x->Get(k));
      const fb::Buffer *q = plan_.buffers()->Get(y->Get(k));
      if (p->dtype() != q->dtype() || p->size_kind() != q->size_kind() ||
          p->numel() != q->numel() || p->group() != q->group())
        return false;
    }
    return true;
  };
  for (size_t i = 0; i < a.size(); ++i) {
    const fb::Instruction &x = *a[i], &y = *b[i];
    const OpcodeInfo &info = *GetOpcodeInfo(x.opcode());
    // Two exits end the run alike, whatever their reason or failed slot
    // (`stop` and `fail("why")`).
    if (x.opcode() == fb::Opcode::Exit && y.opcode() == fb::Opcode::Exit)
      continue;
    if (x.opcode() != y.opcode() || count(x.ints()) != count(y.ints()) ||
        count(x.strings()) != count(y.strings()) ||
        !sameBuffers(x.inputs(), y.inputs()) ||
        !sameBuffers(x.outputs(), y.outputs()))
      return false;
    // Bucket ids name the compiler's buckets, not what the ranks exchange.
    for (uint32_t k = 0; k < count(x.ints()); ++k)
      if (!(k < OpcodeInfo::kLeadingSlots &&
            info.leadingInts[k] == IntAttr::Bucket) &&
          x.ints()->Get(k) != y.ints()->Get(k))
        return false;
    for (uint32_t k = 0; k < count(x.strings()); ++k)
      if (str(x.strings()->Get(k)) != str(y.strings()->Get(k)))
        return false;
  }
  return true;
}

absl::Status SemanticVerifier::checkUniformity() {
  // A plan pinned to one rank has no other rank to disagree with.
  if (plan_.header()->world_size() == 1)
    return absl::OkStatus();
  // Flat instruction ids.
  std::vector<uint32_t> first(numBlocks_ + 1, 0);
  for (uint32_t b = 0; b < numBlocks_; ++b)
    first[b + 1] = first[b] + count(plan_.blocks()->Get(b)->instructions());
  const uint32_t total = first[numBlocks_];
  std::vector<int32_t> blockOf(total);
  for (uint32_t b = 0; b < numBlocks_; ++b)
    std::fill(blockOf.begin() + first[b], blockOf.begin() + first[b + 1],
              static_cast<int32_t>(b));
  auto instAt = [&](uint32_t t) {
    return plan_.blocks()
        ->Get(blockOf[t])
        ->instructions()
        ->Get(t - first[blockOf[t]]);
  };
  // Readers of each buffer (CSR).
  std::vector<uint32_t> readStart(numBuffers_ + 1, 0);
  for (uint32_t t = 0; t < total; ++t) {
    const fb::Instruction *inst = instAt(t);
    for (uint32_t k = 0; k < count(inst->inputs()); ++k)
      ++readStart[inst->inputs()->Get(k) + 1];
  }
  for (uint32_t x = 0; x < numBuffers_; ++x)
    readStart[x + 1] += readStart[x];
  std::vector<uint32_t> readers(readStart[numBuffers_]);
  std::vector<uint32_t> fill(readStart.begin(), readStart.end() - 1);
  for (uint32_t t = 0; t < total; ++t) {
    const fb::Instruction *inst = instAt(t);
    for (uint32_t k = 0; k < count(inst->inputs()); ++k)
      readers[fill[inst->inputs()->Get(k)]++] = t;
  }

  std::vector<bool> varyingBuffer(numBuffers_, false);
  // varyingBlock: its values may differ between ranks; unevenBlock: it runs
  // on some ranks only. They differ for an `if` on a varying condition
  // whose arms communicate alike: every rank runs one of them, so the
  // collectives in them are reached by every rank.
  std::vector<bool> varyingBlock(numBlocks_, false);
  std::vector<bool> unevenBlock(numBlocks_, false);
  std::vector<uint32_t> work;
  auto taintBuffer = [&](int32_t x) {
    if (varyingBuffer[x])
      return;
    varyingBuffer[x] = true;
    for (uint32_t r = readStart[x]; r < readStart[x + 1]; ++r)
      work.push_back(readers[r]);
  };
  auto taintOutputs = [&](const fb::Instruction *inst) {
    for (uint32_t k = 0; k < count(inst->outputs()); ++k)
      taintBuffer(inst->outputs()->Get(k));
  };
  // Marks block b (varying or uneven, by `marks`) and queues its
  // instructions again.
  auto taintBlock = [&](std::vector<bool> &marks, int32_t b) {
    if (marks[b])
      return;
    marks[b] = true;
    for (uint32_t t = first[b]; t < first[b + 1]; ++t)
      work.push_back(t);
  };
  auto anyInputVarying = [&](const fb::Instruction *inst) {
    for (uint32_t k = 0; k < count(inst->inputs()); ++k)
      if (varyingBuffer[inst->inputs()->Get(k)])
        return true;
    return false;
  };
  auto process = [&](uint32_t t) {
    const fb::Instruction *inst = instAt(t);
    const OpcodeInfo &info = *GetOpcodeInfo(inst->opcode());
    int32_t b = blockOf[t];
    fb::Opcode op = inst->opcode();
    // The blocks of an if or a for on a varying condition, and every block
    // run from a varying block, run on some ranks only. (Every block
    // nested in those is reached through its own control instruction.)
    bool conditional = op == fb::Opcode::If || op == fb::Opcode::For;
    bool varyingCondition = conditional && anyInputVarying(inst);
    if (varyingBlock[b] || varyingCondition) {
      for (uint32_t k = 0; k < count(inst->blocks()); ++k)
        taintBlock(varyingBlock, inst->blocks()->Get(k));
    }
    if (unevenBlock[b] || (varyingCondition && !armsCommunicateAlike(*inst))) {
      for (uint32_t k = 0; k < count(inst->blocks()); ++k)
        taintBlock(unevenBlock, inst->blocks()->Get(k));
    }
    bool varies =
        varyingBlock[b] || info.is(kVaryingResult) ||
        op == fb::Opcode::ReduceScatter; // each rank gets another shard
    if (!varies && !info.is(kUniformResult) && !collectiveMakesUniform(*inst))
      varies = anyInputVarying(inst);
    if (!varies)
      return;
    taintOutputs(inst);
    // A yield hands its values to the results of the if that runs its block.
    if (op == fb::Opcode::Yield &&
        plan_.blocks()->Get(b)->kind() != fb::BlockKind::EvalBody) {
      const BlockSite &site = sites_[b];
      taintOutputs(plan_.blocks()
                       ->Get(site.parentBlock)
                       ->instructions()
                       ->Get(site.parentInstruction));
    }
  };
  for (uint32_t t = 0; t < total; ++t)
    process(t);
  while (!work.empty()) {
    uint32_t t = work.back();
    work.pop_back();
    process(t);
  }

  for (uint32_t t = 0; t < total; ++t) {
    int32_t b = blockOf[t];
    if (!unevenBlock[b])
      continue;
    const fb::Instruction *inst = instAt(t);
    const OpcodeInfo &info = *GetOpcodeInfo(inst->opcode());
    if (!talks(*inst) && inst->opcode() != fb::Opcode::MicroSteps)
      continue;
    // The outermost control instruction whose condition varies.
    int32_t cb = b;
    BlockSite site = sites_[cb];
    while (site.parentBlock >= 0 && unevenBlock[site.parentBlock]) {
      cb = site.parentBlock;
      site = sites_[cb];
    }
    return invalidf(
        "blocks[%d].instructions[%d]: %s runs only on the ranks where the "
        "condition of blocks[%d].instructions[%d] holds, and that condition "
        "varies between ranks: %s",
        b, t - first[b], info.name, site.parentBlock, site.parentInstruction,
        inst->opcode() == fb::Opcode::Exit
            ? "the other ranks would wait in the next step's collectives"
            : "the other ranks would wait for it forever");
  }
  return absl::OkStatus();
}

bool SemanticVerifier::collectiveMakesUniform(
    const fb::Instruction &inst) const {
  switch (inst.opcode()) {
  case fb::Opcode::AllReduce:
  case fb::Opcode::Broadcast:
  case fb::Opcode::AllGather: {
    auto group = static_cast<fb::Group>(inst.ints()->Get(0));
    return group == fb::Group::World || (group == fb::Group::Shard && !hybrid_);
  }
  default:
    return false;
  }
}

} // namespace md::plan::detail
