//===- VerifyInstructions.cpp - verify each instruction -------------------===//
//
// Stage (b) of loading a plan: each instruction on its own (opcode, arity,
// buffer indices, attribute kinds and values, operand types from the type
// rules) and then in place (where an opcode may appear in the block tree,
// the yields that end bodies).
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SemanticVerifier.h"

namespace md::plan::detail {

absl::Status SemanticVerifier::checkInstructions() {
  // First each instruction on its own, so that the placement and type
  // checks below may read any instruction's attributes and blocks.
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i)
      MD_RETURN_IF_ERROR(checkInstruction(
          *block->instructions()->Get(i),
          absl::StrFormat("blocks[%d].instructions[%d]", b, i)));
  }
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    uint32_t size = count(block->instructions());
    uint32_t microSteps = 0;
    for (uint32_t i = 0; i < size; ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      std::string path = absl::StrFormat("blocks[%d].instructions[%d]", b, i);
      MD_RETURN_IF_ERROR(checkPlacement(*inst, b, i, size, path));
      if (inst->opcode() == fb::Opcode::MicroSteps && ++microSteps > 1)
        return invalidf("%s: a second micro_steps in the step block", path);
      MD_RETURN_IF_ERROR(detail::CheckOperandTypes(
          plan_, *inst, *GetOpcodeInfo(inst->opcode()), path));
    }
  }
  // Each transient buffer is written before it is read in its interval.
  // The interval may start earlier than the first write (a comm-stream
  // output is reserved from the moment the instruction can start). One
  // pass over the operands: a buffer's uses in its own block, in order.
  struct Use {
    int32_t at;
    bool reads, writes;
  };
  std::vector<std::vector<Use>> uses(numBuffers_);
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      auto note = [&](const flatbuffers::Vector<int32_t> *list, bool write) {
        for (uint32_t k = 0; k < count(list); ++k) {
          int32_t x = list->Get(k);
          const fb::Buffer *buffer = plan_.buffers()->Get(x);
          if (buffer->role() != fb::StateRole::None ||
              buffer->block() != static_cast<int32_t>(b))
            continue;
          std::vector<Use> &u = uses[x];
          if (u.empty() || u.back().at != static_cast<int32_t>(i))
            u.push_back({static_cast<int32_t>(i), false, false});
          (write ? u.back().writes : u.back().reads) = true;
        }
      };
      note(inst->inputs(), false);
      note(inst->outputs(), true);
    }
  }
  for (uint32_t x = 0; x < numBuffers_; ++x) {
    const fb::Buffer *buffer = plan_.buffers()->Get(x);
    if (buffer->role() != fb::StateRole::None)
      continue;
    bool written = false;
    for (const Use &u : uses[x]) {
      if (u.at < buffer->first() || u.at > buffer->last())
        continue;
      if (u.writes) {
        written = true;
        break;
      }
      if (u.reads)
        return invalidf("buffers[%d]: blocks[%d].instructions[%d] reads it "
                        "before anything in its liveness interval [%d, %d] "
                        "writes it",
                        x, buffer->block(), u.at, buffer->first(),
                        buffer->last());
    }
    if (!written)
      return invalidf("buffers[%d]: nothing in its liveness interval "
                      "[%d, %d] of blocks[%d] writes it",
                      x, buffer->first(), buffer->last(), buffer->block());
  }
  // A view aliases its source, which must outlive it.
  for (uint32_t b = 0; b < numBlocks_; ++b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      if (inst->opcode() != fb::Opcode::View)
        continue;
      const fb::Buffer *source = plan_.buffers()->Get(inst->inputs()->Get(0));
      const fb::Buffer *view = plan_.buffers()->Get(inst->outputs()->Get(0));
      if (source->block() != view->block() || source->last() < view->last())
        return invalidf("blocks[%d].instructions[%d]: view buffer %d lives "
                        "until instruction "
                        "%d of blocks[%d], but its source, buffer %d, only "
                        "until instruction %d "
                        "of blocks[%d]",
                        b, i, inst->outputs()->Get(0), view->last(),
                        view->block(), inst->inputs()->Get(0), source->last(),
                        source->block());
    }
  }
  return absl::OkStatus();
}

absl::Status SemanticVerifier::checkArity(absl::string_view path,
                                          const char *field,
                                          const OpcodeInfo &info, Arity arity,
                                          uint32_t n) {
  if (!arity.contains(n))
    return invalidf("%s.%s: %s takes %s, has %d", path, field, info.name,
                    arityText(arity), n);
  return absl::OkStatus();
}

absl::Status
SemanticVerifier::checkBufferList(const flatbuffers::Vector<int32_t> *list,
                                  absl::string_view path, const char *field) {
  for (uint32_t k = 0; k < count(list); ++k) {
    int32_t x = list->Get(k);
    if (x < 0 || static_cast<uint32_t>(x) >= numBuffers_)
      return invalidf("%s.%s[%d]: buffer %d out of range (%d buffers)", path,
                      field, k, x, numBuffers_);
  }
  return absl::OkStatus();
}

absl::Status SemanticVerifier::checkIntAttr(IntAttr kind, int64_t v,
                                            absl::string_view path) {
  auto enumValue = [&](const char *what, int64_t max) -> absl::Status {
    if (v < 0 || v > max)
      return invalidf("%s: %d is not a %s (0 to %d)", path, v, what, max);
    return absl::OkStatus();
  };
  switch (kind) {
  case IntAttr::Any:
    return absl::OkStatus();
  case IntAttr::Bool:
    return enumValue("flag", 1);
  case IntAttr::Positive:
    if (v <= 0)
      return invalidf("%s: %d is not positive", path, v);
    return absl::OkStatus();
  case IntAttr::NonNegative:
    if (v < 0)
      return invalidf("%s: %d is negative", path, v);
    return absl::OkStatus();
  case IntAttr::Bucket:
    if (v < -1)
      return invalidf("%s: bucket %d is neither a bucket id nor -1", path, v);
    return absl::OkStatus();
  case IntAttr::Group:
    return enumValue("group", static_cast<int64_t>(fb::Group::MAX));
  case IntAttr::Reduction:
    return enumValue("reduction", static_cast<int64_t>(fb::Reduction::MAX));
  case IntAttr::PeriodUnit:
    return enumValue("period unit", static_cast<int64_t>(fb::PeriodUnit::MAX));
  case IntAttr::CheckpointFormat:
    return enumValue("checkpoint format",
                     static_cast<int64_t>(fb::CheckpointFormat::MAX));
  case IntAttr::ArithKind:
    return enumValue("scalar arithmetic kind",
                     static_cast<int64_t>(fb::ArithKind::MAX));
  case IntAttr::CompareKind:
    return enumValue("comparison kind",
                     static_cast<int64_t>(fb::CompareKind::MAX));
  case IntAttr::ElementwiseFn:
    return enumValue("elementwise function",
                     static_cast<int64_t>(fb::ElementwiseFn::MAX));
  case IntAttr::Dataset:
    if (v < 0 || v >= static_cast<int64_t>(numDatasets_))
      return invalidf("%s: dataset %d out of range (%d datasets)", path, v,
                      numDatasets_);
    return absl::OkStatus();
  }
  return invalidf("%s: unknown attribute kind", path);
}

absl::Status SemanticVerifier::checkInstruction(const fb::Instruction &inst,
                                                const std::string &path) {
  const OpcodeInfo *found = GetOpcodeInfo(inst.opcode());
  if (!found)
    return invalidf("%s.opcode: unknown opcode %d", path,
                    static_cast<int>(inst.opcode()));
  const OpcodeInfo &info = *found;
  if (OpcodeSchemaVersion(inst.opcode()) > plan_.schema_version())
    return invalidf("%s.opcode: %s needs schema_version %d, the plan says %d",
                    path, info.name, OpcodeSchemaVersion(inst.opcode()),
                    plan_.schema_version());
  if (uint32_t needs =
          InstructionSchemaVersion(inst.opcode(), count(inst.ints()));
      needs > plan_.schema_version())
    return invalidf("%s.ints: %s with %d ints needs schema_version %d, the "
                    "plan says %d",
                    path, info.name, count(inst.ints()), needs,
                    plan_.schema_version());
  MD_RETURN_IF_ERROR(
      checkArity(path, "inputs", info, info.inputs, count(inst.inputs())));
  MD_RETURN_IF_ERROR(
      checkArity(path, "outputs", info, info.outputs, count(inst.outputs())));
  MD_RETURN_IF_ERROR(
      checkArity(path, "ints", info, info.ints, count(inst.ints())));
  MD_RETURN_IF_ERROR(
      checkArity(path, "floats", info, info.floats, count(inst.floats())));
  MD_RETURN_IF_ERROR(
      checkArity(path, "strings", info, info.strings, count(inst.strings())));
  MD_RETURN_IF_ERROR(
      checkArity(path, "blocks", info, info.blocks, count(inst.blocks())));
  MD_RETURN_IF_ERROR(checkBufferList(inst.inputs(), path, "inputs"));
  MD_RETURN_IF_ERROR(checkBufferList(inst.outputs(), path, "outputs"));
  for (uint32_t k = 0; k < count(inst.ints()); ++k)
    MD_RETURN_IF_ERROR(checkIntAttr(info.intKind(k), inst.ints()->Get(k),
                                    absl::StrCat(path, ".ints[", k, "]")));
  for (uint32_t k = 0; k < count(inst.floats()); ++k) {
    const double v = inst.floats()->Get(k);
    const std::string at = absl::StrCat(path, ".floats[", k, "]");
    // A bound may be infinite (no bound); every other float is finite.
    if (info.floatKind(k) == FloatAttr::Bound) {
      if (std::isnan(v))
        return invalidf("%s: a bound is a number or -inf / inf, not NaN", at);
      continue;
    }
    MD_RETURN_IF_ERROR(checkFinite(v, at));
  }

  // Arity that depends on another list.
  uint32_t ins = count(inst.inputs()), outs = count(inst.outputs());
  switch (inst.opcode()) {
  case fb::Opcode::Clip:
    if (outs != ins - 1)
      return invalidf("%s.outputs: clip of %d gradients has %d results", path,
                      ins - 1, outs);
    break;
  case fb::Opcode::SgdUpdate:
    if ((ins == 5) != (outs == 2))
      return invalidf("%s: sgd_update has a momentum buffer among its %s only",
                      path, ins == 5 ? "inputs" : "outputs");
    break;
  case fb::Opcode::ScalarArith: {
    auto kind = static_cast<fb::ArithKind>(inst.ints()->Get(0));
    uint32_t want =
        kind == fb::ArithKind::Neg || kind == fb::ArithKind::Not ? 1 : 2;
    if (ins != want)
      return invalidf("%s.inputs: scalar_arith %s takes %d inputs, has %d",
                      path, fb::EnumNameArithKind(kind), want, ins);
    break;
  }
  case fb::Opcode::Log:
    if (count(inst.strings()) != 1 && count(inst.strings()) != 1 + ins)
      return invalidf("%s.strings: log takes its tag and either no value "
                      "names or one per "
                      "value (%d values), has %d strings",
                      path, ins, count(inst.strings()));
    break;
  default:
    break;
  }

  if (inst.stream() > 1)
    return invalidf("%s.stream: %d is not a stream (0 compute, 1 comm)", path,
                    inst.stream());
  for (uint32_t k = 0; k < count(inst.waits()); ++k) {
    int32_t e = inst.waits()->Get(k);
    if (e < 0 || static_cast<uint32_t>(e) >= numEvents_)
      return invalidf("%s.waits[%d]: event %d out of range (%d events)", path,
                      k, e, numEvents_);
  }
  if (inst.record() < -1 || inst.record() >= static_cast<int64_t>(numEvents_))
    return invalidf("%s.record: event %d out of range (%d events)", path,
                    inst.record(), numEvents_);
  if (inst.loc() < -1 || inst.loc() >= static_cast<int64_t>(numLocations_))
    return invalidf("%s.loc: location %d out of range (%d locations)", path,
                    inst.loc(), numLocations_);
  if (inst.rank0_only()) {
    if (info.is(kCollective))
      return invalidf(
          "%s: rank0_only on %s, which communicates: every rank must run it",
          path, info.name);
    if (!info.is(kIo) || inst.opcode() == fb::Opcode::Exit)
      return invalidf(
          "%s: rank0_only on %s, which is not io that rank 0 may do alone",
          path, info.name);
  }
  // The kinds of nested blocks the opcode runs.
  for (uint32_t k = 0; k < count(inst.blocks()); ++k) {
    fb::BlockKind want = fb::BlockKind::Step;
    switch (inst.opcode()) {
    case fb::Opcode::If:
      want = k == 0 ? fb::BlockKind::Then : fb::BlockKind::Else;
      break;
    case fb::Opcode::Every:
      want = fb::BlockKind::Every;
      break;
    case fb::Opcode::For:
      want = fb::BlockKind::ForBody;
      break;
    case fb::Opcode::MicroSteps:
      want = fb::BlockKind::MicroSteps;
      break;
    case fb::Opcode::Evaluate:
      want = fb::BlockKind::EvalBody;
      break;
    default:
      break;
    }
    fb::BlockKind kind = plan_.blocks()->Get(inst.blocks()->Get(k))->kind();
    if (kind != want)
      return invalidf(
          "%s.blocks[%d]: blocks[%d] is a '%s' block; %s runs a '%s' block",
          path, k, inst.blocks()->Get(k), BlockKindName(kind), info.name,
          BlockKindName(want));
  }
  return absl::OkStatus();
}

absl::Status SemanticVerifier::checkPlacement(const fb::Instruction &inst,
                                              uint32_t b, uint32_t i,
                                              uint32_t size,
                                              const std::string &path) {
  const OpcodeInfo &info = *GetOpcodeInfo(inst.opcode());
  fb::BlockKind kind = plan_.blocks()->Get(b)->kind();
  bool stepTree = !inHooks_[b];
  auto refuse = [&](const char *where) {
    return invalidf("%s: %s %s; it is in a '%s' block", path, info.name, where,
                    BlockKindName(kind));
  };
  if (info.is(kHooksOnly) && stepTree)
    return refuse("runs only in the hooks");
  switch (inst.opcode()) {
  case fb::Opcode::MicroSteps:
    if (kind != fb::BlockKind::Step)
      return refuse("runs only in the step block");
    break;
  case fb::Opcode::GradAccumulate:
    if (kind != fb::BlockKind::MicroSteps)
      return refuse("runs only in the micro-steps body");
    break;
  case fb::Opcode::GradTotal:
    if (kind != fb::BlockKind::Step)
      return refuse("runs only in the step block");
    break;
  case fb::Opcode::RecordLoss:
  case fb::Opcode::AccumScale:
    if (kind != fb::BlockKind::Step && kind != fb::BlockKind::MicroSteps)
      return refuse("runs only in the step block or its micro-steps body");
    break;
  case fb::Opcode::Every:
    // Anywhere in the hooks (the language lets `every` nest and sit in an
    // `if` or a `for`), but not in an evaluation's forward.
    if (stepTree || kind == fb::BlockKind::EvalBody)
      return refuse("runs only in the hooks");
    break;
  case fb::Opcode::Batch: {
    int64_t dataset = inst.ints()->Get(0);
    if (kind == fb::BlockKind::Step || kind == fb::BlockKind::MicroSteps) {
      if (dataset != plan_.recipe()->train_data())
        return invalidf(
            "%s.ints[0]: a training batch reads dataset %d, not the recipe's "
            "train_data %d",
            path, dataset, plan_.recipe()->train_data());
    } else if (kind == fb::BlockKind::EvalBody) {
      const BlockSite &site = sites_[b];
      const fb::Instruction *eval = plan_.blocks()
                                        ->Get(site.parentBlock)
                                        ->instructions()
                                        ->Get(site.parentInstruction);
      if (dataset != eval->ints()->Get(0))
        return invalidf(
            "%s.ints[0]: an evaluation batch reads dataset %d, not its "
            "evaluate's dataset %d",
            path, dataset, eval->ints()->Get(0));
    } else {
      return refuse(
          "runs only in the step, the micro-steps or an evaluation body");
    }
    break;
  }
  case fb::Opcode::Yield: {
    if (kind != fb::BlockKind::Then && kind != fb::BlockKind::Else &&
        kind != fb::BlockKind::EvalBody)
      return refuse("ends only 'then', 'else' and 'eval' blocks");
    if (i + 1 != size)
      return invalidf("%s: yield is not the last instruction of its block",
                      path);
    break;
  }
  default:
    break;
  }
  // The blocks this instruction runs end as their parent needs.
  if (inst.opcode() == fb::Opcode::If) {
    uint32_t results = count(inst.outputs());
    if (results > 0 && count(inst.blocks()) != 2)
      return invalidf("%s.blocks: an if with results needs an else block",
                      path);
    for (uint32_t k = 0; k < count(inst.blocks()); ++k) {
      MD_RETURN_IF_ERROR(checkYield(inst.blocks()->Get(k), results, results > 0,
                                    absl::StrCat(path, ".blocks[", k, "]")));
    }
  } else if (inst.opcode() == fb::Opcode::Evaluate) {
    MD_RETURN_IF_ERROR(checkYield(inst.blocks()->Get(0), 1, true,
                                  absl::StrCat(path, ".blocks[0]")));
  }
  return absl::OkStatus();
}

absl::Status SemanticVerifier::checkYield(int32_t b, uint32_t values,
                                          bool required,
                                          const std::string &path) {
  const fb::Block *block = plan_.blocks()->Get(b);
  uint32_t size = count(block->instructions());
  const fb::Instruction *last =
      size ? block->instructions()->Get(size - 1) : nullptr;
  if (!last || last->opcode() != fb::Opcode::Yield) {
    if (required)
      return invalidf("%s: blocks[%d] does not end with a yield of %d values",
                      path, b, values);
    return absl::OkStatus();
  }
  if (count(last->inputs()) != values)
    return invalidf("%s: blocks[%d] yields %d values, its parent expects %d",
                    path, b, count(last->inputs()), values);
  return absl::OkStatus();
}

} // namespace md::plan::detail
