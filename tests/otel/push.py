"""Pushes one batch of every OpenTelemetry metric instrument to Sluice with
the real OpenTelemetry Python SDK.

Usage: push.py BASE_URL protobuf|json INSTANCE_ID

`protobuf` sends with the SDK's own OTLP/HTTP exporter (gzip on).
`json` sends the SDK's own OTLP encoding of the same data in the OTLP JSON
mapping (the Python SDK ships no JSON exporter), so both paths carry what
the SDK produced. Exits non-zero if the export is not a success.
"""

import sys
import urllib.request

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource


def main() -> int:
    base, mode, instance = sys.argv[1], sys.argv[2], sys.argv[3]
    resource = Resource.create(
        {
            "service.name": "sdk-test",
            "service.namespace": "e2e",
            "service.instance.id": instance,
            "deployment.environment": "ci",
        }
    )
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=resource,
        metric_readers=[reader],
        views=[
            View(
                instrument_name="payload.size",
                aggregation=ExponentialBucketHistogramAggregation(),
            )
        ],
    )
    meter = provider.get_meter("sluice.e2e", "1.0")

    requests = meter.create_counter(
        "http.server.requests", unit="{request}", description="Requests served"
    )
    requests.add(3, {"http.route": "/a"})
    requests.add(2, {"http.route": "/a"})
    requests.add(1, {"http.route": "/b"})

    queue = meter.create_up_down_counter(
        "queue.size", unit="{item}", description="Items waiting"
    )
    queue.add(7)
    queue.add(-2)

    temp = meter.create_gauge("cpu.temperature", unit="Cel", description="CPU temperature")
    temp.set(41.5, {"cpu": "0"})

    duration = meter.create_histogram(
        "http.server.request.duration",
        unit="s",
        description="Duration of HTTP server requests",
        explicit_bucket_boundaries_advisory=[0.01, 0.1, 1.0, 10.0],
    )
    for v in (0.003, 0.2, 1.5):
        duration.record(v, {"http.route": "/a"})

    payload = meter.create_histogram("payload.size", unit="By", description="Payload sizes")
    for v in (100, 200, 3000):
        payload.record(v)

    data = reader.get_metrics_data()
    if mode == "protobuf":
        exporter = OTLPMetricExporter(
            endpoint=f"{base}/v1/metrics", compression=Compression.Gzip, timeout=10
        )
        result = exporter.export(data)
        exporter.shutdown()
        if result != MetricExportResult.SUCCESS:
            print(f"export failed: {result}", file=sys.stderr)
            return 1
    elif mode == "json":
        body = MessageToJson(encode_metrics(data), use_integers_for_enums=True).encode()
        req = urllib.request.Request(
            f"{base}/api/v1/otlp/v1/metrics",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            reply = resp.read().decode()
            if resp.status != 200 or reply != "{}":
                print(f"export failed: {resp.status} {reply}", file=sys.stderr)
                return 1
    else:
        print(f"unknown mode {mode}", file=sys.stderr)
        return 2
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
