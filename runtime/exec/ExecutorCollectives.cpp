//===- ExecutorCollectives.cpp - the executor's collectives ---------------===//
//
// How the executor runs a plan's collectives on the Comm: all-gather and
// reduce-scatter in their flat form (a shard of a flat buffer padded to
// |G| * ceil(N / |G|) elements) and their tensor form (along an axis,
// through the scratch buffer and a transpose), all-reduce, broadcast and
// barrier; and, on a comm that groups collectives (NCCL), the consecutive
// collectives of one bucket issued as one group, their waits before it and
// their records after it. A host comm reads its operands when called, so
// the host waits for the streams first; a stream-ordered comm needs no
// host waits (docs/runtime.md). Every collective the executor runs, the
// plan's and its own, goes through the flight recorder when there is one
// (FlightRecorder.h).
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "runtime/exec/ExecutorImpl.h"
#include "runtime/core/Mesh.h"
#include "runtime/core/Status.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

using namespace plan_access;

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

/// An all-gather (part to whole) or a reduce-scatter (whole to part): its
/// buffers, element type, group and sizes.
struct Executor::Impl::GatherScatter {
  bool gather = false;
  int32_t part = 0, whole = 0;
  DType t = DType::f32;
  const Group *group = nullptr;
  int64_t gs = 0;     // ranks in the group
  int64_t es = 0;     // bytes per element
  int64_t partN = 0;  // elements of the part (a rank's shard)
  int64_t wholeN = 0; // elements of the whole
};

FlightCall Executor::Impl::flightCall(Collective kind, const Group &g,
                                      DType dtype, int64_t bytes) const {
  FlightCall c;
  c.kind = kind;
  c.group = g.kind;
  c.groupSize = g.size();
  c.dtype = dtype;
  c.bytes = bytes;
  c.step = flightStep_;
  c.micro = flightMicro_;
  return c;
}

absl::Status Executor::Impl::recorded(const FlightCall &call,
                                      absl::FunctionRef<absl::Status()> run) {
  FlightRecorder *rec = options_.recorder;
  if (rec == nullptr)
    return run();
  // A host comm runs the collective inside the call; a stream-ordered one
  // only queues it, and it completes when the host next waits for the
  // comm stream (completeQueued), unless the comm claimed the entry and
  // stamps it itself when it runs the collective (the CPU comm thread).
  bool queued = comm_.streamOrdered();
  uint64_t seq =
      rec->begin(call, queued ? FlightState::Queued : FlightState::Started);
  absl::Status s = run();
  rec->settle(seq, s.ok());
  return s;
}

FlightCall
Executor::Impl::describeCollective(const fb::Instruction &inst) const {
  // The payload as the larger of send and receive, the plan's bucket and
  // the .mdl location.
  const Group &g = group(inst.ints()->Get(0));
  // The comm's name for each collective opcode (a barrier otherwise).
  static constexpr std::pair<fb::Opcode, Collective> kKinds[] = {
      {fb::Opcode::AllGather, Collective::all_gather},
      {fb::Opcode::ReduceScatter, Collective::reduce_scatter},
      {fb::Opcode::AllReduce, Collective::all_reduce},
      {fb::Opcode::Broadcast, Collective::broadcast}};
  Collective kind = Collective::barrier;
  for (const auto &[opcode, k] : kKinds)
    if (inst.opcode() == opcode)
      kind = k;
  // The full-size side: an all-gather's output, the others' input (a
  // barrier has neither); the bucket from its slot in the opcode table.
  int32_t x = -1;
  if (kind == Collective::all_gather)
    x = inst.outputs()->Get(0);
  else if (kind != Collective::barrier)
    x = inst.inputs()->Get(0);
  const int slot = plan::GetOpcodeInfo(inst.opcode())->bucketIndex();
  const int64_t bucket = slot >= 0 ? inst.ints()->Get(slot) : -1;
  int64_t payload = 0;
  DType dtype = DType::f32;
  if (x >= 0) {
    payload = bytes(x);
    dtype = kernelDType(buf(x).dtype()).value_or(DType::f32);
  }
  FlightCall call = flightCall(kind, g, dtype, payload);
  call.bucket = bucket;
  call.loc = inst.loc();
  return call;
}

absl::Status Executor::Impl::executeCollective(const fb::Instruction &inst) {
  if (options_.recorder == nullptr)
    return dispatchCollective(inst);
  return recorded(describeCollective(inst),
                  [&] { return dispatchCollective(inst); });
}

absl::Status Executor::Impl::dispatchCollective(const fb::Instruction &inst) {
  const Group &g = group(inst.ints()->Get(0));
  auto dtypeOf = [&](int32_t x) -> absl::StatusOr<DType> {
    std::optional<DType> t = kernelDType(buf(x).dtype());
    if (!t)
      return absl::InvalidArgumentError(
          absl::StrFormat("collectives move f32, bf16, f16, i32 or i64, not %s",
                          plan::DTypeName(buf(x).dtype())));
    return *t;
  };
  switch (inst.opcode()) {
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter: {
    bool gather = inst.opcode() == fb::Opcode::AllGather;
    int32_t part = gather ? inst.inputs()->Get(0) : inst.outputs()->Get(0);
    int32_t whole = gather ? inst.outputs()->Get(0) : inst.inputs()->Get(0);
    GatherScatter c;
    c.gather = gather;
    c.part = part;
    c.whole = whole;
    MD_ASSIGN_OR_RETURN(c.t, dtypeOf(whole));
    c.group = &g;
    c.gs = g.size();
    c.es = esize(whole);
    c.partN = layout_.buffers[part].elements;
    c.wholeN = layout_.buffers[whole].elements;
    if (buf(part).size_kind() == fb::SizeKind::Shard)
      return flatCollective(inst, c);
    return tensorCollective(inst, c);
  }
  case fb::Opcode::AllReduce: {
    int32_t x = inst.inputs()->Get(0), y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(DType t, dtypeOf(x));
    return comm_.allReduce(ptrs_[x], ptrs_[y], layout_.buffers[x].elements, t,
                           static_cast<ReduceOp>(inst.ints()->Get(1)), g);
  }
  case fb::Opcode::Broadcast: {
    int32_t x = inst.inputs()->Get(0), y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(DType t, dtypeOf(x));
    return comm_.broadcast(ptrs_[x], ptrs_[y], layout_.buffers[x].elements, t,
                           static_cast<int>(inst.ints()->Get(2)), g);
  }
  case fb::Opcode::Barrier:
    return comm_.barrier(g);
  default:
    return absl::InternalError("not a collective");
  }
}

absl::Status Executor::Impl::flatCollective(const fb::Instruction &inst,
                                            const GatherScatter &c) {
  // The flat form: pad the whole to |G| * ceil(N / |G|) elements.
  std::optional<mesh::ShardLayout> shards =
      mesh::ShardLayout::of(c.wholeN, c.gs);
  if (!shards || shards->shardNumel() != c.partN)
    return absl::InternalError("flat collective: shard and buffer disagree");
  const int64_t padded = shards->paddedNumel();
  const BufferLayout &wl = layout_.buffers[c.whole];
  bool inPlace =
      wl.placement == Placement::Transient && wl.capacity >= padded * c.es;
  char *full = ptrs_[c.whole];
  if (!inPlace) {
    if (scratch_.bytes() < padded * c.es)
      return absl::InternalError("collective scratch buffer too small");
    full = static_cast<char *>(scratch_.data());
  }
  if (c.gather) {
    MD_RETURN_IF_ERROR(
        comm_.allGather(ptrs_[c.part], full, c.partN, c.t, *c.group));
    if (!inPlace)
      MD_RETURN_IF_ERROR(
          backend_.copy(ptrs_[c.whole], full, c.wholeN * c.es, kCommStream));
    return absl::OkStatus();
  }
  if (!inPlace)
    MD_RETURN_IF_ERROR(
        backend_.copy(full, ptrs_[c.whole], c.wholeN * c.es, kCommStream));
  if (padded > c.wholeN)
    MD_RETURN_IF_ERROR(backend_.zero(full + c.wholeN * c.es,
                                     (padded - c.wholeN) * c.es, kCommStream));
  // A host comm reads `full` now; a stream-ordered one after the copy
  // and the zeroing on the same stream.
  if (!comm_.streamOrdered())
    MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
  auto op = static_cast<ReduceOp>(inst.ints()->Get(1));
  return comm_.reduceScatter(full, ptrs_[c.part], c.partN, c.t, op, *c.group);
}

absl::Status Executor::Impl::tensorCollective(const fb::Instruction &inst,
                                              const GatherScatter &c) {
  // The tensor form along `axis`.
  int64_t axis = inst.ints()->Get(c.gather ? 2 : 3);
  const Shape &p = ref(c.part).shape;
  if (axis == 0) {
    if (c.gather)
      return comm_.allGather(ptrs_[c.part], ptrs_[c.whole], c.partN, c.t,
                             *c.group);
    auto op = static_cast<ReduceOp>(inst.ints()->Get(1));
    return comm_.reduceScatter(ptrs_[c.whole], ptrs_[c.part], c.partN, c.t, op,
                               *c.group);
  }
  if (scratch_.bytes() < c.wholeN * c.es)
    return absl::InternalError("collective scratch buffer too small");
  // stacked: [G, p...]; split: p with dim `axis` split into [G, p[axis]].
  Shape stacked{c.gs}, split;
  stacked.insert(stacked.end(), p.begin(), p.end());
  for (int64_t d = 0; d < static_cast<int64_t>(p.size()); ++d) {
    if (d == axis)
      split.push_back(c.gs);
    split.push_back(p[d]);
  }
  TransposeArgs tr;
  tr.stream = kCommStream;
  if (c.gather) {
    MD_RETURN_IF_ERROR(comm_.allGather(ptrs_[c.part], scratch_.data(), c.partN,
                                       c.t, *c.group));
    tr.x = TensorRef(scratch_.data(), c.t, stacked);
    tr.out = TensorRef(ptrs_[c.whole], c.t, split);
    for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d)
      tr.perm.push_back(d < axis ? d + 1 : d == axis ? 0 : d);
    return backend_.transpose(tr);
  }
  tr.x = TensorRef(ptrs_[c.whole], c.t, split);
  tr.out = TensorRef(scratch_.data(), c.t, stacked);
  for (int64_t d = 0; d < static_cast<int64_t>(stacked.size()); ++d)
    tr.perm.push_back(d == 0 ? axis : d <= axis ? d - 1 : d);
  MD_RETURN_IF_ERROR(backend_.transpose(tr));
  if (!comm_.streamOrdered())
    MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
  auto op = static_cast<ReduceOp>(inst.ints()->Get(1));
  return comm_.reduceScatter(scratch_.data(), ptrs_[c.part], c.partN, c.t, op,
                             *c.group);
}

//===----------------------------------------------------------------------===//
// Groups
//===----------------------------------------------------------------------===//

int64_t Executor::Impl::groupableBucket(const fb::Instruction &inst) const {
  if (inst.stream() != kCommStream.id || inst.blocks() != nullptr ||
      count(inst.ints()) < 3)
    return -1;
  int64_t bucket = -1;
  switch (inst.opcode()) {
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter: {
    bool gather = inst.opcode() == fb::Opcode::AllGather;
    bucket = inst.ints()->Get(gather ? 1 : 2);
    int32_t part = gather ? inst.inputs()->Get(0) : inst.outputs()->Get(0);
    int32_t whole = gather ? inst.outputs()->Get(0) : inst.inputs()->Get(0);
    if (buf(part).size_kind() == fb::SizeKind::Shard) {
      // Only in place: through the scratch buffer a copy must follow the
      // collective, which a group has not launched yet.
      const BufferLayout &wl = layout_.buffers[whole];
      std::optional<int64_t> padded =
          mesh::paddedNumel(wl.elements, group(inst.ints()->Get(0)).size());
      if (wl.placement != Placement::Transient || !padded ||
          wl.capacity < *padded * esize(whole))
        return -1;
    } else if (count(inst.ints()) < (gather ? 3u : 4u) ||
               inst.ints()->Get(gather ? 2 : 3) != 0) {
      return -1; // along an inner axis: a transpose through the scratch
    }
    break;
  }
  case fb::Opcode::AllReduce:
    bucket = inst.ints()->Get(2);
    break;
  case fb::Opcode::Broadcast:
    bucket = inst.ints()->Get(1);
    break;
  default:
    return -1;
  }
  return bucket;
}

uint32_t Executor::Impl::groupEnd(const fb::Block &block, uint32_t i) const {
  if (!comm_.groupsCollectives() || !comm_.streamOrdered())
    return i;
  const fb::Instruction &first = *block.instructions()->Get(i);
  int64_t bucket = groupableBucket(first);
  if (bucket < 0)
    return i;
  std::vector<int32_t> recorded;
  if (first.record() >= 0)
    recorded.push_back(first.record());
  uint32_t end = i + 1;
  for (; end < count(block.instructions()); ++end) {
    const fb::Instruction &next = *block.instructions()->Get(end);
    if (groupableBucket(next) != bucket)
      break;
    // Its waits move before the group: none may wait for a member.
    bool waitsOnMember = false;
    for (uint32_t w = 0; w < count(next.waits()); ++w)
      waitsOnMember =
          waitsOnMember || std::find(recorded.begin(), recorded.end(),
                                     next.waits()->Get(w)) != recorded.end();
    if (waitsOnMember)
      break;
    if (next.record() >= 0)
      recorded.push_back(next.record());
  }
  return end;
}

absl::Status Executor::Impl::runGroup(const fb::Block &block, uint32_t begin,
                                      uint32_t end) {
  // Every member's waits, then the members between beginGroup and
  // endGroup, then their records: until endGroup the collectives may not
  // be queued, so an event recorded earlier would not follow them.
  for (uint32_t i = begin; i < end; ++i) {
    const fb::Instruction &inst = *block.instructions()->Get(i);
    for (uint32_t w = 0; w < count(inst.waits()); ++w)
      MD_RETURN_IF_ERROR(
          backend_.waitEvent(kCommStream, events_[inst.waits()->Get(w)]));
  }
  MD_RETURN_IF_ERROR(comm_.beginGroup());
  absl::Status s;
  for (uint32_t i = begin; i < end && s.ok(); ++i) {
    const fb::Instruction &inst = *block.instructions()->Get(i);
    forgetScalarsWrittenBy(inst);
    s = executeCollective(inst);
  }
  absl::Status ended = comm_.endGroup();
  MD_RETURN_IF_ERROR(s);
  MD_RETURN_IF_ERROR(ended);
  for (uint32_t i = begin; i < end; ++i) {
    const fb::Instruction &inst = *block.instructions()->Get(i);
    if (inst.record() >= 0)
      MD_RETURN_IF_ERROR(
          backend_.recordEvent(kCommStream, events_[inst.record()]));
  }
  return absl::OkStatus();
}

} // namespace md::runtime
