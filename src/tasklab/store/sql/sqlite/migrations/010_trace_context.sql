-- The W3C trace context of the code that submitted a task (`tasklab[otel]`, JSON of
-- traceparent/tracestate), restored by the worker so that one trace crosses processes.
ALTER TABLE tasks ADD COLUMN trace_context TEXT;
