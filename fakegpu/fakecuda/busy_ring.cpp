// The busy-time writer of fakecuda's state file in C++: state.Publisher.busy/flush and shared_state.StateFile.busy
// with the same arithmetic, on the same mapping.
//
// Why not Python: the fast path (charge_fast.cpp) hands its busy records over every few milliseconds, after the
// step's kernels have left the caches cold for Python, and a record then cost 15 us there (2.5 us warm): about 0.5%
// of a small transformer's step, 0.7% of a conv net's. Here a record is a few loads and one store into the mapping,
// and the fast path writes its records without calling Python at all.
//
// One writer per state file: while a BusyRing is open, the Publisher sends every record through it (its own ops'
// too), so the open span and each device's track (shared_state._Track) live here only, and records reach the ring
// in the order they happened, as before (Runtime.ran and synced() drain the fast path's records first). The ring
// holds a buffer export of the file's mmap, so the mapping cannot be closed under it: Publisher.close() closes the
// ring first. Everything runs under the GIL.
#include <torch/extension.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace {

struct Layout {  // shared_state's numbers, handed over by Python (one source of truth: shared_state.py)
  int64_t off_busy, busy_slots, slot_ns, slot_us, us_bits, slot_bits, kernel_ns, gap_ns, max_devices;
  int64_t work_compute, work_memory;
};

struct Track {  // shared_state._Track
  int64_t end = -(int64_t{1} << 62);
  int64_t kind;
  int64_t carry[2] = {0, 0};
};

struct Span {  // state.Publisher._span
  int64_t board, kind, start, end, slot_end;
};

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

class BusyRing {
 public:
  BusyRing(py::object mapping, const Layout& layout, int64_t pid) : layout_(layout), pid_(pid) {
    if (PyObject_GetBuffer(mapping.ptr(), &view_, PyBUF_WRITABLE) < 0) throw py::error_already_set();
    const int64_t end = layout_.off_busy + 8 * layout_.busy_slots * layout_.max_devices;
    if (view_.len < end) {
      PyBuffer_Release(&view_);
      throw py::value_error("the mapping is smaller than a state file's busy rings");
    }
    open_ = true;
    for (int64_t i = 0; i < layout_.max_devices; ++i) tracks_.push_back(Track{.kind = layout_.work_memory});
  }
  BusyRing(const BusyRing&) = delete;
  BusyRing& operator=(const BusyRing&) = delete;
  ~BusyRing() {
    if (open_) PyBuffer_Release(&view_);  // (under the GIL: pybind destroys its objects holding it)
  }

  bool open() const { return open_; }

  // Publisher.busy: `started`/`ended` < 0 stand for None.
  void busy(int64_t board, bool compute, int64_t started, int64_t ended) {
    if (!open_) return;
    const int64_t now = ended < 0 ? monotonic_ns() : ended;
    const int64_t kind = compute ? layout_.work_compute : layout_.work_memory;
    if (has_span_) {
      Span& span = span_;
      if (started >= 0 && span.board == board && span.kind == kind && now < span.slot_end &&
          started < span.end + layout_.gap_ns && started != now) {
        if (now > span.end) span.end = now;
        return;
      }
      flush();
    }
    if (started < 0 || started >= now) {
      write(board, kind, started, now);
    } else {
      span_ = Span{board, kind, started, now, (floor_div(now, layout_.slot_ns) + 1) * layout_.slot_ns};
      has_span_ = true;
    }
  }

  // Publisher.flush
  void flush() {
    if (!has_span_) return;
    has_span_ = false;
    write(span_.board, span_.kind, span_.start, span_.end);
  }

  void close() {
    if (!open_) return;
    flush();
    open_ = false;
    PyBuffer_Release(&view_);
  }

 private:
  // Publisher._write then StateFile.busy (start < 0: None)
  void write(int64_t device, int64_t kind, int64_t start_ns, int64_t end_ns) {
    if (!open_ || getpid() != pid_) return;  // a forked child writes nothing of its parent's
    if (device < 0 || device >= layout_.max_devices) throw py::value_error("a busy record's device is out of range");
    const int64_t t1 = end_ns;
    const int64_t t0 = (start_ns < 0 || start_ns > t1) ? t1 : start_ns;
    Track& track = tracks_[device];
    const int64_t end = track.end;
    const int64_t start = t0 > end ? t0 : end;
    int64_t stop = t0 == t1 ? start + layout_.kernel_ns : t1;
    if (stop < t1) stop = t1;
    int64_t from = start;
    if (end < t0 && t0 < end + layout_.gap_ns) {  // continues the previous work: the gap was busy with it
      if (track.kind == kind) {
        from = end;
      } else {
        accrue(device, track, track.kind, end, t0);
      }
    }
    if (stop > from) accrue(device, track, kind, from, stop);
    if (stop > end) track.end = stop;
    track.kind = kind;
  }

  // StateFile._accrue
  void accrue(int64_t device, Track& track, int64_t kind, int64_t a, int64_t b) {
    int64_t k = floor_div(a, layout_.slot_ns);
    const int64_t last = floor_div(b - 1, layout_.slot_ns);
    if (last - k >= layout_.busy_slots) k = last - layout_.busy_slots + 1;
    auto* base = static_cast<unsigned char*>(view_.buf) + layout_.off_busy + 8 * device * layout_.busy_slots;
    const uint64_t us_mask = (uint64_t{1} << layout_.us_bits) - 1;
    const uint64_t slot_mask = (uint64_t{1} << layout_.slot_bits) - 1;
    for (; k <= last; ++k) {
      const int64_t lo = k * layout_.slot_ns;
      const int64_t ns = std::min(b, lo + layout_.slot_ns) - std::max(a, lo) + track.carry[kind];
      const int64_t us = floor_div(ns, 1000);
      track.carry[kind] = ns - us * 1000;
      if (us == 0) continue;
      unsigned char* at = base + 8 * (((k % layout_.busy_slots) + layout_.busy_slots) % layout_.busy_slots);
      uint64_t word;
      std::memcpy(&word, at, 8);
      const uint64_t tag = static_cast<uint64_t>(k) & slot_mask;
      uint64_t compute = 0, memory = 0;
      if ((word >> (2 * layout_.us_bits)) == tag) {
        compute = (word >> layout_.us_bits) & us_mask;
        memory = word & us_mask;
      }
      const uint64_t cap = static_cast<uint64_t>(layout_.slot_us);
      if (kind == layout_.work_compute) {
        compute = std::min(cap, compute + static_cast<uint64_t>(us));
      } else {
        memory = std::min(cap, memory + static_cast<uint64_t>(us));
      }
      word = tag << (2 * layout_.us_bits) | compute << layout_.us_bits | memory;
      // one 8-byte store (the Python writer's struct "Q"): a reader never sees half a word
      __atomic_store_n(reinterpret_cast<uint64_t*>(at), word, __ATOMIC_RELAXED);
    }
  }

  Layout layout_;
  int64_t pid_;
  Py_buffer view_{};
  bool open_ = false;
  std::vector<Track> tracks_;
  bool has_span_ = false;
  Span span_{};
};

// The ring the fast path writes into (the one open for the active Publisher), or none.
std::shared_ptr<BusyRing>& current = *new std::shared_ptr<BusyRing>();  // (leaked: see charge_fast.cpp's `fast`)

}  // namespace

// charge_fast.cpp's drain: a record straight into the open ring; false when there is none (the records go to
// Python then, as before).
bool ring_busy(int64_t board, bool compute, int64_t started, int64_t ended) {
  const std::shared_ptr<BusyRing> ring = current;
  if (!ring || !ring->open()) return false;
  ring->busy(board, compute, started, ended);
  return true;
}

bool ring_open() { return current && current->open(); }

void register_busy_ring(py::module_& m) {
  py::class_<BusyRing, std::shared_ptr<BusyRing>>(m, "BusyRing",
                                                 "A state file's busy-time writer (state.Publisher's, in C++).")
      .def(py::init([](py::object mapping, py::dict layout, int64_t pid) {
             auto get = [&](const char* name) { return layout[name].cast<int64_t>(); };
             const Layout l{get("OFF_BUSY"),    get("BUSY_SLOTS"), get("SLOT_NS"),      get("SLOT_US"),
                            get("US_BITS"),     get("SLOT_BITS"),  get("KERNEL_NS"),    get("BUSY_GAP_NS"),
                            get("MAX_DEVICES"), get("WORK_COMPUTE"), get("WORK_MEMORY")};
             auto ring = std::make_shared<BusyRing>(std::move(mapping), l, pid);
             current = ring;  // the fast path writes here from now on
             return ring;
           }),
           py::arg("mapping"), py::arg("layout"), py::arg("pid"))
      .def("busy", [](BusyRing& r, int64_t board, bool compute, py::object started, py::object ended) {
             r.busy(board, compute, started.is_none() ? -1 : started.cast<int64_t>(),
                    ended.is_none() ? -1 : ended.cast<int64_t>());
           },
           py::arg("board"), py::arg("compute") = false, py::arg("started_ns") = py::none(),
           py::arg("ended_ns") = py::none(), "Publisher.busy")
      .def("flush", &BusyRing::flush, "Publisher.flush")
      .def("close", [](const std::shared_ptr<BusyRing>& r) {
             r->close();
             if (current == r) current.reset();
           },
           "Write the open span and let go of the mapping; the fast path's records go to Python again.")
      .def_property_readonly("open", &BusyRing::open);
}
