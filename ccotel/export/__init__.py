"""Export: SpanRecords -> a trace backend (OTLP over HTTP or gRPC, the console, memory), with
what each attempt came to."""
