// lens._analysis: the `lens` command's reader and analysis for Python
// (pybind11), behind lens.analysis's DataFrames. The same C++ as `lens
// analyze`: the run is read, aligned and analysed here, with the GIL
// released; Python only arranges the results.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "analyze.h"
#include "rank_order.h"
#include "run_reader.h"
#include "span_table.h"
#include "split_threads.h"
#include "step_stream.h"

namespace py = pybind11;

namespace {

// A column handed to numpy whole: the array owns the vector.
template <typename T>
py::array column(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule free(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(owned->size()), owned->data(), free);
}

// Fixed-width id texts as a numpy array of strs; a row with the same id as
// the row before it (a step's trace id, a parent's id) shares its str.
py::array id_column(const lens::analysis::IdColumn& ids) {
  const std::size_t n = ids.width == 0 ? 0 : ids.bytes.size() / ids.width;
  py::array out = py::module_::import("numpy").attr("empty")(n, py::arg("dtype") = "object");
  auto** slot = static_cast<PyObject**>(out.mutable_data());
  PyObject* previous = nullptr;
  std::string_view previous_text;
  for (std::size_t i = 0; i < n; ++i) {
    const char* at = ids.bytes.data() + i * ids.width;
    const std::string_view text(at, ::strnlen(at, ids.width));
    PyObject* id = nullptr;
    if (previous != nullptr && text == previous_text) {
      id = previous;
      Py_INCREF(id);
    } else {
      id = PyUnicode_FromStringAndSize(text.data(), static_cast<Py_ssize_t>(text.size()));
      if (id == nullptr) throw py::error_already_set();
      previous = id;
      previous_text = text;
    }
    Py_XDECREF(slot[i]);  // numpy's None
    slot[i] = id;
  }
  return out;
}

// A dictionary's texts as Python strs.
py::list texts(const lens::analysis::TextDictionary& d) {
  py::list out;
  for (const auto& t : d.texts()) out.append(py::str(t));
  return out;
}

// A typed attribute text (its type character, then the text: span_attributes.h)
// as Python: an int, float, bool or str.
py::object typed_value(const std::string& typed) {
  const std::string text = typed.substr(1);
  switch (typed[0]) {
    case 'i': return py::int_(py::str(text));
    case 'd': return py::float_(std::stod(text));
    case 'b': return py::bool_(text == "true");
    default: return py::str(text);
  }
}

}  // namespace

PYBIND11_MODULE(_analysis, m) {
  m.doc() = "lens's run reader and step analysis (the lens command's), for lens.analysis";
  py::register_exception<lens::analysis::ReadError>(m, "ReadError", PyExc_ValueError);

  // A rank's place from the layout's sizes (rank_order.h), as lens.otel
  // reads Megatron's resource attributes; ValueError for what does not fit.
  m.def(
      "place_rank",
      [](int rank, int world_size, const std::array<int, lens::analysis::kParallelDims>& sizes,
         const std::string& order) {
        lens::analysis::RankPlace p;
        try {
          p = lens::analysis::place_rank(rank, world_size, sizes, order);
        } catch (const std::invalid_argument& e) {
          throw py::value_error(std::string("lens: ") + e.what());
        }
        py::dict d;
        d["rank"] = p.rank;
        d["world_size"] = p.world_size;
        d["pp_size"] = p.size(lens::analysis::ParallelDim::kPp);
        d["dp_size"] = p.size(lens::analysis::ParallelDim::kDp);
        d["tp_size"] = p.size(lens::analysis::ParallelDim::kTp);
        d["pp"] = p.coord(lens::analysis::ParallelDim::kPp);
        d["dp"] = p.coord(lens::analysis::ParallelDim::kDp);
        d["tp"] = p.coord(lens::analysis::ParallelDim::kTp);
        d["pipeline_source"] = p.pipeline_source;
        return d;
      },
      py::arg("rank"), py::arg("world_size"), py::arg("sizes"),
      py::arg("order") = std::string(lens::analysis::kMegatronRankOrder));
  // The threads a read uses (`lens --threads N`'s setting; 0: the cores).
  m.def("set_read_threads", [](int threads) { lens::analysis::set_default_read_threads(threads); },
        py::arg("threads"));
  m.def(
      "read_span_table",
      [](const std::string& dir, bool raw_clock, const std::vector<std::string>& attributes) {
        lens::analysis::SpanTable t;
        std::vector<std::string> warnings;
        {
          py::gil_scoped_release release;
          t = lens::analysis::read_span_table(dir, raw_clock, &warnings, attributes);
        }
        // Numbers as arrays; each text column as its codes and its
        // dictionary (lens.analysis makes them the DataFrame's columns);
        // ids as arrays of strs.
        py::dict columns;
        columns["rank"] = column(std::move(t.rank));
        columns["replica"] = column(std::move(t.replica));
        columns["tensor"] = column(std::move(t.tensor));
        columns["stage"] = column(std::move(t.stage));
        columns["step"] = column(std::move(t.step));
        columns["microbatch"] = column(std::move(t.microbatch));
        columns["chunk"] = column(std::move(t.chunk));
        columns["name"] = py::make_tuple(column(std::move(t.name)), texts(t.names));
        columns["kind"] = py::make_tuple(column(std::move(t.kind)), texts(t.kinds));
        columns["start_ns"] = column(std::move(t.start_ns));
        columns["end_ns"] = column(std::move(t.end_ns));
        columns["aligned"] = column(std::move(t.aligned));
        columns["trace_id"] = id_column(t.trace_id);
        columns["span_id"] = id_column(t.span_id);
        columns["parent_span_id"] = id_column(t.parent_span_id);
        columns["links"] = column(std::move(t.links));
        columns["status_code"] = column(std::move(t.status_code));
        py::list attribute_columns;
        for (auto& a : t.attributes) {
          py::list values;
          for (const auto& typed : a.values.texts()) values.append(typed_value(typed));
          attribute_columns.append(py::make_tuple(a.key, column(std::move(a.value)), values));
        }
        return py::make_tuple(columns, attribute_columns, warnings);
      },
      py::arg("dir"), py::arg("raw_clock") = false,
      py::arg("attributes") = std::vector<std::string>(),
      "Every span of the run as columns (numbers as arrays, texts as codes and a dictionary, "
      "ids as arrays of strs), the attributes asked for (key, codes, values) and the "
      "readers' warnings.");

  m.def(
      "analyze_json",
      [](const std::string& dir, bool raw_clock, bool critical_path) {
        std::string text;
        std::vector<std::string> warnings;
        {
          py::gil_scoped_release release;
          // As `lens analyze` reads (split_threads.h).
          lens::analysis::AnalyzeOptions o;
          o.raw_clock = raw_clock;
          o.keep_critical_path = critical_path;
          text = lens::analysis::format_json(lens::analysis::analyze_on_threads_or_one_stream(
              dir, o, lens::analysis::default_read_threads(), &warnings));
        }
        return py::make_tuple(text, warnings);
      },
      py::arg("dir"), py::arg("raw_clock") = false, py::arg("critical_path") = true,
      "`lens analyze --json` of the run (with every step's critical path) and the warnings.");
}
