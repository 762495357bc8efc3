// Compiled with the core part's include path only (tests/CMakeLists.txt,
// layout.*): the core's own headers are there, a higher part's are not.
#include "lens/span.h"
#ifdef LENS_PROBE_REACH_UP
#include "lens/otlp_http_exporter.h"
#endif

int main() { return lens::Span().recording() ? 1 : 0; }
