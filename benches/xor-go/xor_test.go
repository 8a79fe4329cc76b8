// Times Prometheus' own XOR chunk encoder (tsdb/chunkenc) on the samples of
// tests/testdata/xor: the same work as benches/xor.rs, so that
// scripts/bench-xor can print Sluice's time as a ratio of Go's measured in
// the same minutes. Not part of the Rust build; scripts/bench-xor copies it
// beside a Prometheus source tree and runs `go test -bench`.
//
// Append: every series into a fresh chunk, as Prometheus' BenchmarkXORAppender
// does. Iterate: every sample of every chunk, with one reused iterator.
// One benchmark op is one pass over the 1000 series × 120 samples.
package xorgo

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

type sample struct {
	t int64
	v float64
}

var cases = []string{"constant", "random_steps", "random_0-1"}

// load reads <case>.bin: u32 series count, then per series a u32 sample
// count and (i64 timestamp, u64 value bits) pairs, all little-endian.
func load(b *testing.B, name string) [][]sample {
	raw, err := os.ReadFile(filepath.Join(os.Getenv("XOR_TESTDATA"), name+".bin"))
	if err != nil {
		b.Fatalf("read %s: %v (set XOR_TESTDATA to tests/testdata/xor)", name, err)
	}
	u32 := func() uint32 {
		if len(raw) < 4 {
			b.Fatalf("%s: truncated", name)
		}
		x := binary.LittleEndian.Uint32(raw)
		raw = raw[4:]
		return x
	}
	series := make([][]sample, u32())
	for i := range series {
		n := int(u32())
		if len(raw) < 16*n {
			b.Fatalf("%s: truncated", name)
		}
		s := make([]sample, n)
		for j := range s {
			s[j].t = int64(binary.LittleEndian.Uint64(raw[16*j:]))
			s[j].v = math.Float64frombits(binary.LittleEndian.Uint64(raw[16*j+8:]))
		}
		raw = raw[16*n:]
		series[i] = s
	}
	return series
}

func encode(b *testing.B, s []sample) *chunkenc.XORChunk {
	c := chunkenc.NewXORChunk()
	app, err := c.Appender()
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range s {
		app.Append(p.t, p.v)
	}
	return c
}

func samples(series [][]sample) int {
	n := 0
	for _, s := range series {
		n += len(s)
	}
	return n
}

var sink interface{}

func BenchmarkAppend(b *testing.B) {
	for _, name := range cases {
		series := load(b, name)
		n := samples(series)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				for _, s := range series {
					sink = encode(b, s)
				}
			}
			b.ReportMetric(float64(n), "samples/op")
		})
	}
}

func BenchmarkIterate(b *testing.B) {
	for _, name := range cases {
		series := load(b, name)
		n := samples(series)
		chunks := make([]*chunkenc.XORChunk, len(series))
		// The whole-case hash of the testdata README: u32 LE length, then
		// the chunk bytes, for each chunk in order.
		h := sha256.New()
		for i, s := range series {
			chunks[i] = encode(b, s)
			var l [4]byte
			binary.LittleEndian.PutUint32(l[:], uint32(len(chunks[i].Bytes())))
			h.Write(l[:])
			h.Write(chunks[i].Bytes())
		}
		b.Logf("%s sha256 %s", name, hex.EncodeToString(h.Sum(nil)))
		b.Run(name, func(b *testing.B) {
			var it chunkenc.Iterator
			var ts int64
			var acc float64
			got := 0
			for i := 0; i < b.N; i++ {
				for _, c := range chunks {
					it = c.Iterator(it)
					for it.Next() == chunkenc.ValFloat {
						t, v := it.At()
						ts += t
						acc += v
						got++
					}
				}
			}
			if got != n*b.N {
				b.Fatalf("%s: iterated %d samples, want %d", name, got, n*b.N)
			}
			sink = [2]interface{}{ts, acc}
			b.ReportMetric(float64(n), "samples/op")
		})
	}
}
