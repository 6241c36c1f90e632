"""Prometheus metrics of one worker process (the official ``prometheus_client``), served at ``/metrics``.

Each app has its own registry, so several apps in one process (tests) never collide. With several
uvicorn workers every worker counts its own requests: a scrape reaches one of them (use one worker per
container, or sum over scrapes).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The service's metrics.

    Attributes:
        requests: ``mrope_requests_total{endpoint, method, status}``.
        latency: ``mrope_request_duration_seconds{endpoint, status}``, from the first byte of the
            request to the last of the response.
        tokens: ``mrope_tokens_built_total``, positions built (``T`` per sequence, ``B*L`` per rope-index).
        media_seconds: ``mrope_media_seconds{kind}``, time spent reading one uploaded file (kind: image,
            video, or failed).
        media_busy: ``mrope_media_threads_busy``, media readers running now (timed-out ones included
            until they stop).
        rejections: ``mrope_rejections_total{reason}``, error responses by their error code.
        in_flight: ``mrope_requests_in_flight``, requests in progress (counted against
            ``MROPE_MAX_CONCURRENT``; :class:`mrope.service._operator.ConcurrencyLimit` gives its count).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "mrope_requests", "HTTP requests answered", ["endpoint", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "mrope_request_duration_seconds",
            "Time to answer a request",
            ["endpoint", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("mrope_tokens_built", "Positions built (tokens)", registry=r)
        self.media_seconds = Histogram(
            "mrope_media_seconds",
            "Time spent reading one uploaded file",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.media_busy = Gauge(
            "mrope_media_threads_busy", "Media readers running (timed-out ones until they stop)", registry=r
        )
        self.rejections = Counter("mrope_rejections", "Error responses by error code", ["reason"], registry=r)
        self.in_flight = Gauge("mrope_requests_in_flight", "Requests in progress", registry=r)

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
