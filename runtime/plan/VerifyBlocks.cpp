//===- VerifyBlocks.cpp - verify the block tree and buffers ---------------===//
//
// Stage (b) of loading a plan: the block tree (every block reached once
// from the step block, its depth capped, hooks and bodies where they may
// be) and the buffer table (sizes consistent with dtype and shape in
// overflow-checked arithmetic, liveness intervals inside their block).
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SemanticVerifier.h"

namespace md::plan::detail {

absl::Status SemanticVerifier::checkBlockTree() {
  numBlocks_ = count(plan_.blocks());
  sites_.assign(numBlocks_, BlockSite{});
  std::vector<bool> hasParent(numBlocks_, false);
  auto checkRoot = [&](int32_t block, const char *field,
                       fb::BlockKind kind) -> absl::Status {
    if (block < 0 || static_cast<uint32_t>(block) >= numBlocks_)
      return invalidf("%s: block %d out of range (%d blocks)", field, block,
                      numBlocks_);
    if (plan_.blocks()->Get(block)->kind() != kind)
      return invalidf("%s: blocks[%d] is a '%s' block, not a '%s' block", field,
                      block, BlockKindName(plan_.blocks()->Get(block)->kind()),
                      BlockKindName(kind));
    hasParent[block] = true;
    return absl::OkStatus();
  };
  MD_RETURN_IF_ERROR(
      checkRoot(plan_.step_block(), "step_block", fb::BlockKind::Step));
  if (plan_.hooks_block() != -1) {
    if (plan_.hooks_block() == plan_.step_block())
      return invalidf("hooks_block: block %d is also the step block",
                      plan_.hooks_block());
    MD_RETURN_IF_ERROR(
        checkRoot(plan_.hooks_block(), "hooks_block", fb::BlockKind::Hooks));
  }
  // Each block is run from exactly one place.
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    MD_RETURN_IF_ERROR(checkEnum(
        block->kind(), absl::StrCat("blocks[", b, "].kind"), "block kind"));
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
        int32_t child = inst->blocks()->Get(k);
        std::string path =
            absl::StrFormat("blocks[%d].instructions[%d].blocks[%d]", b, i, k);
        if (child < 0 || static_cast<uint32_t>(child) >= numBlocks_)
          return invalidf("%s: block %d out of range (%d blocks)", path, child,
                          numBlocks_);
        if (hasParent[child]) {
          if (child == plan_.step_block() || child == plan_.hooks_block())
            return invalidf("%s: block %d is the %s block", path, child,
                            child == plan_.step_block() ? "step" : "hooks");
          return invalidf(
              "%s: block %d is already run by blocks[%d].instructions[%d]",
              path, child, sites_[child].parentBlock,
              sites_[child].parentInstruction);
        }
        hasParent[child] = true;
        sites_[child].parentBlock = static_cast<int32_t>(b);
        sites_[child].parentInstruction = static_cast<int32_t>(i);
      }
    }
  }
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    if (!hasParent[b])
      return invalidf("blocks[%d]: no instruction runs it", b);
  }
  // Depths by a walk from the roots; a block it does not reach sits on a
  // cycle of blocks running each other.
  std::vector<bool> reached(numBlocks_, false);
  std::vector<int32_t> queue;
  queue.push_back(plan_.step_block());
  if (plan_.hooks_block() != -1)
    queue.push_back(plan_.hooks_block());
  for (int32_t root : queue)
    reached[root] = true;
  for (size_t head = 0; head < queue.size(); ++head) {
    int32_t b = queue[head];
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
        int32_t child = inst->blocks()->Get(k);
        sites_[child].depth = sites_[b].depth + 1;
        if (sites_[child].depth > kMaxBlockDepth)
          return invalidf("blocks[%d]: nested %d blocks deep, more than %d",
                          child, sites_[child].depth, kMaxBlockDepth);
        reached[child] = true;
        queue.push_back(child);
      }
    }
  }
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    if (!reached[b])
      return invalidf("blocks[%d]: not reachable from the step or hooks "
                      "block (blocks that "
                      "run each other form a cycle)",
                      b);
  }
  // Which tree each block belongs to.
  inHooks_.assign(numBlocks_, false);
  for (int32_t b : queue) {
    const BlockSite &site = sites_[b];
    inHooks_[b] = b == plan_.hooks_block() ||
                  (site.parentBlock >= 0 && inHooks_[site.parentBlock]);
  }
  return absl::OkStatus();
}

absl::Status SemanticVerifier::checkBuffers() {
  numBuffers_ = count(plan_.buffers());
  for (auto [i, buffer, path] : entries(plan_.buffers(), "buffers")) {
    if (DTypeSize(buffer->dtype()) == 0)
      return invalidf("%s.dtype: %d is not an element type", path,
                      static_cast<int>(buffer->dtype()));
    MD_RETURN_IF_ERROR(checkEnum(
        buffer->size_kind(), absl::StrCat(path, ".size_kind"), "size kind"));
    if (buffer->numel() < 0)
      return invalidf("%s.numel: %d is negative", path, buffer->numel());
    if (buffer->size_kind() == fb::SizeKind::Full) {
      int64_t numel = 0;
      MD_RETURN_IF_ERROR(
          checkShape(buffer->shape(), absl::StrCat(path, ".shape"), &numel));
      if (numel != buffer->numel())
        return invalidf("%s.numel: %d, but its shape has %d elements", path,
                        buffer->numel(), numel);
    } else {
      if (count(buffer->shape()) != 0)
        return invalidf("%s.shape: a shard has no static shape (%d dims given)",
                        path, count(buffer->shape()));
      MD_RETURN_IF_ERROR(
          checkEnum(buffer->group(), absl::StrCat(path, ".group"), "group"));
    }
    int64_t bytes = 0;
    if (__builtin_mul_overflow(buffer->numel(), DTypeSize(buffer->dtype()),
                               &bytes))
      return invalidf("%s: %d elements of %s overflow 64-bit byte counts", path,
                      buffer->numel(), DTypeName(buffer->dtype()));
    MD_RETURN_IF_ERROR(
        checkEnum(buffer->role(), absl::StrCat(path, ".role"), "state role"));
    MD_RETURN_IF_ERROR(checkEnum(buffer->category(),
                                 absl::StrCat(path, ".category"),
                                 "memory category"));
    if (buffer->category() == fb::MemoryCategory::Host &&
        (buffer->size_kind() != fb::SizeKind::Full || buffer->numel() != 1))
      return invalidf("%s.category: host, but not a scalar (%d elements)", path,
                      buffer->numel());
    if (buffer->role() != fb::StateRole::None) {
      if (buffer->unit() < -1 ||
          buffer->unit() >= static_cast<int64_t>(numUnits_))
        return invalidf("%s.unit: unit %d out of range (%d units)", path,
                        buffer->unit(), numUnits_);
      if (buffer->block() != -1 || buffer->first() != -1 ||
          buffer->last() != -1)
        return invalidf("%s: persistent (%s) but has a liveness interval", path,
                        StateRoleName(buffer->role()));
      if (buffer->role() == fb::StateRole::Frozen) {
        if (plan_.schema_version() < kFrozenSchemaVersion)
          return invalidf("%s.role: frozen parameters need schema_version "
                          "%d, the plan says %d",
                          path, kFrozenSchemaVersion, plan_.schema_version());
        if (buffer->unit() < 0)
          return invalidf("%s.unit: a frozen state belongs to a unit", path);
      }
      continue;
    }
    // Transient.
    if (buffer->unit() != -1)
      return invalidf("%s.unit: %d on a transient buffer (must be -1)", path,
                      buffer->unit());
    if (buffer->only_when_accumulating())
      return invalidf("%s.only_when_accumulating: set on a transient buffer",
                      path);
    if (buffer->block() < 0 ||
        static_cast<uint32_t>(buffer->block()) >= numBlocks_)
      return invalidf("%s.block: block %d out of range (%d blocks)", path,
                      buffer->block(), numBlocks_);
    uint32_t size = count(plan_.blocks()->Get(buffer->block())->instructions());
    if (buffer->first() < 0 || buffer->last() < buffer->first() ||
        static_cast<uint32_t>(buffer->last()) >= size)
      return invalidf("%s: liveness interval [%d, %d] is not within the %d "
                      "instructions of "
                      "blocks[%d]",
                      path, buffer->first(), buffer->last(), size,
                      buffer->block());
  }
  return absl::OkStatus();
}

} // namespace md::plan::detail
