//! OTLP/HTTP metrics ingest (in progress): the naming rules that turn OTLP
//! metric and attribute names into the names Prometheus' own OTLP receiver
//! gives them, under its default `UnderscoreEscapingWithSuffixes` strategy.
//! The decoder and endpoint build on these.

pub mod names;
