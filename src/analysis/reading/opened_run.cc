#include "opened_run.h"

#include <algorithm>
#include <system_error>

#include "run_import.h"
#include "run_reader.h"

namespace lens::analysis {

OpenedRun::State::~State() {
  if (!dir.empty() && dir != input) release_import(dir);  // an import it made
}

OpenedRun::OpenedRun(const std::filesystem::path& input) {
  std::error_code ec;
  if (!std::filesystem::exists(input, ec))
    throw ReadError(input.string() + ": no such file or directory");
  auto state = std::make_shared<State>();
  state->input = input;
  if (is_lens_layout(input)) {
    state->dir = input;
  } else {
    ImportedRun imported = import_for_reading(input);
    state->dir = std::move(imported.dir);
    state->warnings = std::move(imported.stats.warnings);
  }
  for (const auto& e : std::filesystem::directory_iterator(state->dir))
    if (e.is_regular_file() && e.path().string().ends_with(".otlp.jsonl"))
      state->files.push_back(e.path());
  std::sort(state->files.begin(), state->files.end());
  if (state->files.empty()) throw ReadError(state->dir.string() + ": no *.otlp.jsonl files");
  state_ = std::move(state);
}

}  // namespace lens::analysis
