// The caching-allocator model of allocator.py, in C++: the same rules, statistics and addresses, at a fraction of
// the cost per tensor (a fakecuda training step allocates and frees every op output through it).
//
// allocator.py stays the reference: it documents the rules in PyTorch's words and runs where this extension is not
// built; tests/fakecuda/test_allocator_cxx.py replays random workloads through both and requires every address,
// statistic, segment and event to agree. Keep the two in step: a rule changed here is changed there.
//
// Python sees blocks by their device address (an int): a live allocation's address is unique on its device, and
// the tracker only hands back what malloc returned. Everything else (segments, statistics) is read through
// tables that allocator_cxx.py shapes into allocator.py's forms.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

constexpr uint64_t kMinBlockSize = 512;
constexpr uint64_t kSmallSize = 1ULL << 20;
constexpr uint64_t kSmallBuffer = 2ULL << 20;
constexpr uint64_t kLargeBuffer = 20ULL << 20;
constexpr uint64_t kMinLargeAlloc = 10ULL << 20;
constexpr uint64_t kRoundLarge = 2ULL << 20;
constexpr uint64_t kAddressBase = 0x7F0000000000ULL;
constexpr uint64_t kAddressStride = 1ULL << 40;

// stats.CORE_STATS, in its order; pools as stats.POOL_TYPES: all, small_pool, large_pool
enum Core { ALLOCATION, SEGMENT, ACTIVE, INACTIVE_SPLIT, ALLOCATED_BYTES, RESERVED_BYTES, ACTIVE_BYTES,
            INACTIVE_SPLIT_BYTES, REQUESTED_BYTES, N_CORE };
constexpr int kSmallPool = 1, kLargePool = 2;

[[noreturn]] void assertion(const std::string& message) {
  PyErr_SetString(PyExc_AssertionError, message.c_str());
  throw py::error_already_set();
}

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    if (current < 0) assertion("negative allocator statistic: the model lost track of a block");
    freed += amount;
  }
  py::tuple table() const { return py::make_tuple(current, peak, allocated, freed); }
};

struct Block {
  int64_t stream;
  uint64_t size;
  uint64_t requested_size = 0;
  uint64_t ptr;
  bool small;
  bool allocated = false;
  bool stream_uses = false;  // used on another stream (record_stream): reclaimed once that work is done
  bool pending = false;      // freed, awaiting that work
  Block* prev = nullptr;
  Block* next = nullptr;
  Block(int64_t stream, uint64_t size, bool small, uint64_t ptr) : stream(stream), size(size), ptr(ptr), small(small) {}
  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// PyTorch's BlockComparatorSize: (stream, size, address)
struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};
using Pool = std::set<Block*, BySize>;

// allocator.AddressSpace: the lowest free range that holds a segment; freed ranges merge and are reused
class AddressSpace {
 public:
  AddressSpace(uint64_t base, uint64_t span) { free_[base] = base + span; }
  uint64_t take(uint64_t size) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      auto [start, end] = *it;
      if (end - start >= size) {
        free_.erase(it);
        if (end - start > size) free_[start + size] = end;
        return start;
      }
    }
    PyErr_SetString(PyExc_MemoryError, "fake device address space exhausted");
    throw py::error_already_set();
  }
  void give(uint64_t ptr, uint64_t size) {
    uint64_t start = ptr, end = ptr + size;
    auto next = free_.lower_bound(ptr);
    if (next != free_.end() && next->first == end) {
      end = next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->second == start) {
        start = prev->first;
        free_.erase(prev);
      }
    }
    free_[start] = end;
  }

 private:
  std::map<uint64_t, uint64_t> free_;  // start -> end
};

class Allocator {
 public:
  Allocator(int device, int64_t device_total, uint64_t max_split_size, uint64_t max_non_split_rounding_size,
            std::vector<uint64_t> divisions, int64_t non_pytorch_bytes)
      : device(device), device_total(device_total), non_pytorch_bytes(non_pytorch_bytes),
        max_split_size(max_split_size), max_non_split_rounding_size(max_non_split_rounding_size),
        divisions_(std::move(divisions)),
        addresses_(kAddressBase + static_cast<uint64_t>(device) * kAddressStride, kAddressStride) {
    if (divisions_.empty()) throw py::value_error("roundup_power2_divisions must not be empty");
  }
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;
  ~Allocator() {
    std::vector<Block*> all;
    for (auto& [ptr, b] : active_)
      if (b->allocated) all.push_back(b);  // (the others are in pending_)
    all.insert(all.end(), small_.begin(), small_.end());
    all.insert(all.end(), large_.begin(), large_.end());
    all.insert(all.end(), pending_.begin(), pending_.end());
    for (Block* b : all) delete b;
  }

  int device;
  int64_t device_total;
  int64_t non_pytorch_bytes;
  uint64_t max_split_size;
  uint64_t max_non_split_rounding_size;
  int64_t total_allocated_memory = 0;
  std::optional<int64_t> allowed_memory_maximum;
  py::object others = py::none();    // () -> [(pid, bytes), ...] held by the run's other processes
  py::object on_event = py::none();  // (action, address, size, stream, extra), as allocator.py's

  Stat core[N_CORE][3];
  Stat oversize_allocations, oversize_segments;
  int64_t num_alloc_retries = 0, num_ooms = 0, num_sync_all_streams = 0, num_device_alloc = 0, num_device_free = 0;

  // (others() is Python too; it is called only where the model is whole: before a segment is taken, and for
  // an OOM's event)
  int64_t device_free() {
    int64_t held = 0;
    if (!others.is_none()) {
      for (py::handle entry : others()) held += entry[py::int_(1)].cast<int64_t>();
    }
    return std::max<int64_t>(0, device_total - non_pytorch_bytes - total_allocated_memory - held);
  }

  // the block's address, or nullopt with OOM counted (the caller raises ModelOutOfMemory); alloc_size_out: what
  // cudaMalloc was asked for
  std::optional<uint64_t> malloc(int64_t orig, int64_t stream, uint64_t& alloc_size_out) {
    if (orig < 0) throw py::value_error("allocation size must be >= 0");
    Events events(events_);
    if (!pending_.empty()) drain_pending();
    uint64_t orig_size = static_cast<uint64_t>(orig);
    uint64_t size = round_size(orig_size);
    bool small = size <= kSmallSize;
    Pool& pool = small ? small_ : large_;
    uint64_t alloc_size = allocation_size(size);
    alloc_size_out = alloc_size;
    Block* block = get_free_block(pool, stream, size);
    if (block == nullptr) {
      block = alloc_block(small, stream, alloc_size, false);
      if (block == nullptr && release_available_cached_blocks(pool, stream, size))
        block = alloc_block(small, stream, alloc_size, false);
      if (block == nullptr) {
        release_cached();
        block = alloc_block(small, stream, alloc_size, true);
      }
    }
    if (block == nullptr) {
      num_ooms += 1;
      if (!on_event.is_none()) event("oom", 0, size, stream, device_free());
      flush_events(events);
      return std::nullopt;
    }
    uint64_t ptr = alloc_found_block(block, pool, small, stream, size, orig_size);
    flush_events(events);
    return ptr;
  }

  void free(uint64_t ptr) {
    auto it = active_.find(ptr);
    if (it == active_.end() || !it->second->allocated) {
      assertion("double free of the block at " + hex(ptr) + " on device " + std::to_string(device));
    }
    Events events(events_);
    Block* block = it->second;
    block->allocated = false;
    event("free_requested", block->ptr, block->requested_size, block->stream);
    int pool = block->small ? kSmallPool : kLargePool;
    fall(ALLOCATION, pool, 1);
    fall(ALLOCATED_BYTES, pool, block->size);
    if (block->size >= max_split_size) oversize_allocations.decrease(1);
    if (block->stream_uses) {
      // work queued on other streams may still read the block: reclaimed at the next malloc (process_events)
      block->pending = true;
      pending_.push_back(block);
    } else {
      free_block(block);
    }
    flush_events(events);
  }

  void record_stream(uint64_t ptr, int64_t stream) {
    auto it = active_.find(ptr);
    if (it != active_.end() && stream != it->second->stream) it->second->stream_uses = true;
  }

  void release_cached_blocks() {
    Events events(events_);
    release_cached();
    flush_events(events);
  }

  void reset_peak() {
    for (auto& row : core)
      for (auto& s : row) s.peak = s.current;
    oversize_allocations.peak = oversize_allocations.current;
    oversize_segments.peak = oversize_segments.current;
  }

  void reset_accumulated() {
    for (auto& row : core)
      for (auto& s : row) s.allocated = s.freed = 0;
    for (Stat* s : {&oversize_allocations, &oversize_segments}) s->allocated = s->freed = 0;
    num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
  }

  // (core stats as CORE_STATS x POOL_TYPES (current, peak, allocated, freed), oversize_allocations,
  //  oversize_segments, num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc, num_device_free)
  py::tuple stats_table() const {
    py::list rows;
    for (auto& row : core) rows.append(py::make_tuple(row[0].table(), row[1].table(), row[2].table()));
    return py::make_tuple(rows, oversize_allocations.table(), oversize_segments.table(), num_alloc_retries, num_ooms,
                          num_sync_all_streams, num_device_alloc, num_device_free);
  }

  // every live segment, by address, as its blocks: (address, size, requested_size, state, stream, is_small), the
  // state as PyTorch's snapshots name it
  py::list segment_table() const {
    std::vector<Block*> heads;
    auto add = [&](Block* b) {
      if (b->prev == nullptr) heads.push_back(b);
    };
    for (auto& [ptr, b] : active_)
      if (b->allocated) add(b);  // (a freed block awaiting other streams is in pending_)
    for (Block* b : small_) add(b);
    for (Block* b : large_) add(b);
    for (Block* b : pending_) add(b);
    std::sort(heads.begin(), heads.end(), [](Block* a, Block* b) { return a->ptr < b->ptr; });
    py::list segments;
    for (Block* head : heads) {
      py::list chain;
      for (Block* b = head; b != nullptr; b = b->next) {
        const char* state = b->allocated ? "active_allocated" : b->pending ? "active_awaiting_free" : "inactive";
        chain.append(py::make_tuple(b->ptr, b->size, b->requested_size, state, b->stream, b->small));
      }
      segments.append(chain);
    }
    return segments;
  }

 private:
  Pool small_, large_;
  std::unordered_map<uint64_t, Block*> active_;  // allocated blocks by address
  std::vector<Block*> pending_;
  std::vector<uint64_t> divisions_;
  AddressSpace addresses_;

  static std::string hex(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(v));
    return buf;
  }

  // Events are collected while a public operation changes the model and handed to on_event once it is done: the
  // callback is Python, which may let another thread in, and that thread must find no half-made change. An
  // operation that another one enters (through others(), also Python) owns the events from its start on; one that
  // raises drops its own.
  struct Event {
    const char* action;
    uint64_t ptr, size;
    int64_t stream;
    int64_t device_free;  // oom only
  };
  std::vector<Event> events_;

  struct Events {
    std::vector<Event>& buffer;
    size_t start;
    bool done = false;
    explicit Events(std::vector<Event>& buffer) : buffer(buffer), start(buffer.size()) {}
    ~Events() {
      if (!done && buffer.size() > start) buffer.resize(start);
    }
  };

  void event(const char* action, uint64_t ptr, uint64_t size, int64_t stream, int64_t device_free = -1) {
    if (!on_event.is_none()) events_.push_back({action, ptr, size, stream, device_free});
  }

  void flush_events(Events& mine) {
    mine.done = true;
    if (events_.size() <= mine.start) return;
    std::vector<Event> events(events_.begin() + static_cast<std::ptrdiff_t>(mine.start), events_.end());
    events_.resize(mine.start);
    for (const Event& e : events) {
      py::dict extra;
      if (e.device_free >= 0) extra["device_free"] = e.device_free;
      on_event(e.action, e.ptr, e.size, e.stream, extra);
    }
  }

  void release_cached() {
    num_sync_all_streams += 1;
    drain_pending();
    for (Pool* pool : {&large_, &small_}) {
      std::vector<Block*> unsplit;
      for (Block* b : *pool)
        if (!b->is_split()) unsplit.push_back(b);
      for (Block* b : unsplit) release_block(b);
    }
  }

  void rise(int name, int pool, int64_t amount) {
    core[name][0].increase(amount);
    core[name][pool].increase(amount);
  }
  void fall(int name, int pool, int64_t amount) {
    core[name][0].decrease(amount);
    core[name][pool].decrease(amount);
  }

  uint64_t round_size(uint64_t size) const {
    if (size < kMinBlockSize) return kMinBlockSize;
    int interval = 63 - __builtin_clzll(size) - 20;
    interval = std::clamp(interval, 0, static_cast<int>(divisions_.size()) - 1);
    uint64_t divisions = divisions_[interval];
    // size > 512 * divisions, without the product (a huge division count would overflow it)
    if (divisions > 1 && (size - 1) / kMinBlockSize >= divisions) return roundup_power2_next_division(size, divisions);
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
  }

  static uint64_t roundup_power2_next_division(uint64_t size, uint64_t divisions) {
    if ((size & (size - 1)) == 0) return size;
    uint64_t floor = 1ULL << (63 - __builtin_clzll(size));
    uint64_t step = floor >> (63 - __builtin_clzll(divisions));
    if (step == 0) return floor << 1;
    uint64_t rounded = size & ~(step - 1);
    return rounded == size ? size : rounded + step;
  }

  static uint64_t allocation_size(uint64_t size) {
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
  }

  Block* get_free_block(Pool& pool, int64_t stream, uint64_t size) {
    Block probe(stream, size, false, 0);
    auto it = pool.lower_bound(&probe);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    if (size < max_split_size && block->size >= max_split_size) return nullptr;
    if (size >= max_split_size && block->size >= saturating_add(size, max_non_split_rounding_size)) return nullptr;
    pool.erase(it);
    return block;
  }

  Block* alloc_block(bool small, int64_t stream, uint64_t size, bool is_retry) {
    if (is_retry) num_alloc_retries += 1;
    if (allowed_memory_maximum &&
        static_cast<int64_t>(size) > *allowed_memory_maximum - total_allocated_memory)
      return nullptr;
    if (size > static_cast<uint64_t>(device_free())) return nullptr;
    uint64_t ptr = addresses_.take(size);
    total_allocated_memory += static_cast<int64_t>(size);
    Block* block = new Block(stream, size, small, ptr);
    int pool = small ? kSmallPool : kLargePool;
    rise(SEGMENT, pool, 1);
    rise(RESERVED_BYTES, pool, size);
    if (size >= max_split_size) oversize_segments.increase(1);
    num_device_alloc += 1;
    event("segment_alloc", ptr, size, stream);
    return block;
  }

  bool should_split(const Block* block, uint64_t size) const {
    uint64_t remaining = block->size - size;
    if (block->small) return remaining >= kMinBlockSize;
    return size < max_split_size && remaining > kSmallSize;
  }

  uint64_t alloc_found_block(Block* block, Pool& pool, bool small, int64_t stream, uint64_t size, uint64_t orig_size) {
    int name = small ? kSmallPool : kLargePool;
    bool already_split = block->is_split();
    if (should_split(block, size)) {
      Block* remaining = block;
      block = new Block(stream, size, small, remaining->ptr);
      block->prev = remaining->prev;
      if (block->prev != nullptr) block->prev->next = block;
      block->next = remaining;
      remaining->prev = block;
      remaining->ptr += size;
      remaining->size -= size;
      pool.insert(remaining);
      if (already_split) {
        fall(INACTIVE_SPLIT_BYTES, name, block->size);
      } else {
        rise(INACTIVE_SPLIT_BYTES, name, remaining->size);
        rise(INACTIVE_SPLIT, name, 1);
      }
    } else if (already_split) {
      fall(INACTIVE_SPLIT_BYTES, name, block->size);
      fall(INACTIVE_SPLIT, name, 1);
    }
    block->allocated = true;
    block->requested_size = orig_size;
    active_[block->ptr] = block;
    rise(ALLOCATION, name, 1);
    rise(ACTIVE, name, 1);
    rise(ALLOCATED_BYTES, name, block->size);
    rise(ACTIVE_BYTES, name, block->size);
    rise(REQUESTED_BYTES, name, orig_size);
    if (block->size >= max_split_size) oversize_allocations.increase(1);
    event("alloc", block->ptr, orig_size, stream);
    return block->ptr;
  }

  void free_block(Block* block) {
    Pool& pool = block->small ? small_ : large_;
    uint64_t original_size = block->size, requested = block->requested_size;
    event("free_completed", block->ptr, requested, block->stream);
    int64_t split_blocks_change = 0, split_bytes_change = 0;
    // the address before a merge with the block below moves it: the active entry is keyed by the old one
    active_.erase(block->ptr);
    for (Block* candidate : {block->prev, block->next}) {
      uint64_t subsumed = try_merge_blocks(block, candidate, pool);
      if (subsumed) {
        split_blocks_change -= 1;
        split_bytes_change -= static_cast<int64_t>(subsumed);
      }
    }
    pool.insert(block);
    if (block->is_split()) {
      split_blocks_change += 1;
      split_bytes_change += static_cast<int64_t>(block->size);
    }
    int name = block->small ? kSmallPool : kLargePool;
    if (split_blocks_change > 0) rise(INACTIVE_SPLIT, name, split_blocks_change);
    else if (split_blocks_change < 0) fall(INACTIVE_SPLIT, name, -split_blocks_change);
    if (split_bytes_change > 0) rise(INACTIVE_SPLIT_BYTES, name, split_bytes_change);
    else if (split_bytes_change < 0) fall(INACTIVE_SPLIT_BYTES, name, -split_bytes_change);
    fall(ACTIVE, name, 1);
    fall(ACTIVE_BYTES, name, original_size);
    fall(REQUESTED_BYTES, name, requested);
  }

  uint64_t try_merge_blocks(Block* dst, Block* src, Pool& pool) {
    if (src == nullptr || src->allocated || src->stream_uses || src->pending) return 0;
    pool.erase(src);
    if (dst->prev == src) {
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev != nullptr) dst->prev->next = dst;
    } else {
      dst->next = src->next;
      if (dst->next != nullptr) dst->next->prev = dst;
    }
    dst->size += src->size;
    uint64_t subsumed = src->size;
    delete src;
    return subsumed;
  }

  // free oversize cached blocks: the smallest that suffices, or else the largest first
  bool release_available_cached_blocks(Pool& pool, int64_t stream, uint64_t size) {
    if (max_split_size == UINT64_MAX) return false;
    uint64_t target = std::max(size, max_split_size);
    Block probe(stream, target, false, 0);
    auto it = pool.lower_bound(&probe);
    if (it != pool.end() && (*it)->stream == stream) {
      release_block(*it);
      return true;
    }
    uint64_t released = 0;
    while (released < target && it != pool.begin()) {
      Block* block = *std::prev(it);  // `it` stays valid across the erase of the block before it
      if (block->size < max_split_size || block->stream != stream) break;
      released += block->size;
      release_block(block);
    }
    return released >= target;
  }

  void release_block(Block* block) {
    event("segment_free", block->ptr, block->size, block->stream);
    num_device_free += 1;
    total_allocated_memory -= static_cast<int64_t>(block->size);
    int name = block->small ? kSmallPool : kLargePool;
    fall(SEGMENT, name, 1);
    fall(RESERVED_BYTES, name, block->size);
    if (block->size >= max_split_size) oversize_segments.decrease(1);
    (block->small ? small_ : large_).erase(block);
    addresses_.give(block->ptr, block->size);
    delete block;
  }

  void drain_pending() {
    std::vector<Block*> pending;
    pending.swap(pending_);
    for (Block* block : pending) {
      block->stream_uses = false;
      block->pending = false;
      free_block(block);
    }
  }
};

}  // namespace

void register_allocator(py::module_& m) {
  py::class_<Allocator>(m, "Allocator", py::dynamic_attr())
      .def(py::init<int, int64_t, uint64_t, uint64_t, std::vector<uint64_t>, int64_t>(), py::arg("device"),
           py::arg("device_total"), py::arg("max_split_size"), py::arg("max_non_split_rounding_size"),
           py::arg("divisions"), py::arg("non_pytorch_bytes"))
      // the block's address; out of memory calls self._out_of_memory(alloc_size, orig_size), which raises
      .def("malloc",
           [](py::object self, int64_t orig_size, int64_t stream) -> py::object {
             Allocator& a = self.cast<Allocator&>();
             uint64_t alloc_size = 0;
             std::optional<uint64_t> ptr = a.malloc(orig_size, stream, alloc_size);
             if (ptr) return py::int_(*ptr);
             self.attr("_out_of_memory")(alloc_size, orig_size);
             assertion("_out_of_memory returned instead of raising");
           },
           py::arg("orig_size"), py::arg("stream") = 0)
      .def("free", &Allocator::free)
      .def("record_stream", &Allocator::record_stream)
      .def("release_cached_blocks", [](Allocator& a) {
        a.release_cached_blocks();
        return true;
      })
      .def("device_free", &Allocator::device_free)
      .def("reset_peak", &Allocator::reset_peak)
      .def("reset_accumulated", &Allocator::reset_accumulated)
      .def("stats_table", &Allocator::stats_table)
      .def("segment_table", &Allocator::segment_table)
      .def_readonly("device", &Allocator::device)
      .def_readwrite("device_total", &Allocator::device_total)
      .def_readwrite("non_pytorch_bytes", &Allocator::non_pytorch_bytes)
      .def_readonly("total_allocated_memory", &Allocator::total_allocated_memory)
      .def_readonly("num_device_alloc", &Allocator::num_device_alloc)
      .def_readwrite("allowed_memory_maximum", &Allocator::allowed_memory_maximum)
      .def_readwrite("others", &Allocator::others)
      .def_readwrite("on_event", &Allocator::on_event);
}

// The model as the charging hook's C++ fast path (charge_fast.cpp) calls it, without Python in between.
void* cxx_allocator(py::handle obj) {
  if (!py::isinstance<Allocator>(obj)) return nullptr;
  return &obj.cast<Allocator&>();
}

bool cxx_malloc(void* allocator, int64_t size, int64_t stream, uint64_t* ptr, uint64_t* alloc_size) {
  std::optional<uint64_t> got = static_cast<Allocator*>(allocator)->malloc(size, stream, *alloc_size);
  if (got) *ptr = *got;
  return got.has_value();
}

void cxx_free(void* allocator, uint64_t ptr) { static_cast<Allocator*>(allocator)->free(ptr); }

// (reserved bytes, cudaMalloc count): what Runtime.malloc compares before and after
std::pair<int64_t, int64_t> cxx_usage(void* allocator) {
  auto* a = static_cast<Allocator*>(allocator);
  return {a->total_allocated_memory, a->num_device_alloc};
}
