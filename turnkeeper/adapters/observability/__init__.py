"""Operations: Prometheus metrics, OpenTelemetry traces, and the HTTP side of both."""
