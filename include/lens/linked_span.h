/// \file
/// create_linked_span: a span that carries an OpenTelemetry Link to another
/// rank's context.
///
/// The span's parent is the caller's current span (see CurrentSpanScope), or none; its
/// one link points at `remote` (in the step protocol: the source rank's step
/// span). It is started in the `communication` group, so it costs one branch
/// when that group is off. If `remote` is missing or invalid the span is
/// still created, without a link, and counted in pipeline_stats(); this is
/// never an error.
///
/// Thread safety: as Tracer::start_span.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>

#include "lens/attribute.h"
#include "lens/carrier.h"
#include "lens/span.h"
#include "lens/tracer.h"

namespace lens {

Span create_linked_span(const Tracer& tracer, std::string_view name,
                        const std::optional<SpanContext>& remote, Attributes attributes = {});
/// The same with the attributes as a braced list, e.g.
/// `{{"dl.microbatch_id", id}}` (what a call site writes): set from the
/// list as it stands, no vector or key copied first.
Span create_linked_span(const Tracer& tracer, std::string_view name,
                        const std::optional<SpanContext>& remote,
                        std::initializer_list<BorrowedAttribute> attributes);

namespace detail {
// A carrier's context, if there is a carrier.
inline std::optional<SpanContext> carrier_context(const std::optional<StepCarrier>& carrier) {
  return carrier ? std::optional<SpanContext>(carrier->context) : std::nullopt;
}
}  // namespace detail

inline Span create_linked_span(const Tracer& tracer, std::string_view name,
                               const std::optional<StepCarrier>& remote_carrier,
                               Attributes attributes = {}) {
  return create_linked_span(tracer, name, detail::carrier_context(remote_carrier),
                            std::move(attributes));
}
inline Span create_linked_span(const Tracer& tracer, std::string_view name,
                               const std::optional<StepCarrier>& remote_carrier,
                               std::initializer_list<BorrowedAttribute> attributes) {
  return create_linked_span(tracer, name, detail::carrier_context(remote_carrier), attributes);
}

}  // namespace lens
