// lens._analysis: the `lens` command's reader and analysis for Python
// (pybind11), behind lens.analysis's DataFrames. The same C++ as `lens
// analyze`: the run is read, aligned and analysed here, with the GIL
// released; Python only arranges the results.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <string>
#include <vector>

#include "analyze.h"
#include "rank_order.h"
#include "run_reader.h"
#include "span_table.h"

namespace py = pybind11;

namespace {

template <typename T>
py::list column(const std::vector<T>& values) {
  py::list out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = py::cast(values[i]);
  return out;
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
  m.def(
      "read_span_table",
      [](const std::string& dir, bool raw_clock) {
        lens::analysis::SpanTable t;
        std::vector<std::string> warnings;
        {
          py::gil_scoped_release release;
          t = lens::analysis::read_span_table(dir, raw_clock, &warnings);
        }
        py::dict columns;
        columns["rank"] = column(t.rank);
        columns["replica"] = column(t.replica);
        columns["tensor"] = column(t.tensor);
        columns["stage"] = column(t.stage);
        columns["step"] = column(t.step);
        columns["microbatch"] = column(t.microbatch);
        columns["chunk"] = column(t.chunk);
        columns["name"] = column(t.name);
        columns["kind"] = column(t.kind);
        columns["start_ns"] = column(t.start_ns);
        columns["end_ns"] = column(t.end_ns);
        std::vector<bool> aligned(t.aligned.begin(), t.aligned.end());
        columns["aligned"] = column(aligned);
        columns["trace_id"] = column(t.trace_id);
        columns["span_id"] = column(t.span_id);
        columns["parent_span_id"] = column(t.parent_span_id);
        columns["links"] = column(t.links);
        columns["status_code"] = column(t.status_code);
        return py::make_tuple(columns, warnings);
      },
      py::arg("dir"), py::arg("raw_clock") = false,
      "Every span of the run as columns (dict of lists) and the readers' warnings.");

  m.def(
      "analyze_json",
      [](const std::string& dir, bool raw_clock, bool critical_path) {
        std::string text;
        std::vector<std::string> warnings;
        {
          py::gil_scoped_release release;
          lens::analysis::AnalyzeOptions o;
          o.raw_clock = raw_clock;
          o.keep_critical_path = critical_path;
          text = lens::analysis::format_json(lens::analysis::analyze_run(dir, o, &warnings));
        }
        return py::make_tuple(text, warnings);
      },
      py::arg("dir"), py::arg("raw_clock") = false, py::arg("critical_path") = true,
      "`lens analyze --json` of the run (with every step's critical path) and the warnings.");
}
