// franz: a franz-go (kgo) client run by test_1006. It produces, consumes in a
// group, commits, then resumes the group from its commit, and prints what it
// did; franz-go's debug log goes to stderr, where the test reads which
// versions of each request the client chose.
//
//	franz -b HOST:PORT -t TOPIC -g GROUP -n COUNT [-848]
//
// -848 runs the groups with the KIP-848 consumer protocol (kgo.ServerSideBalancer:
// ConsumerGroupHeartbeat, the coordinator assigns), else the classic one.
//
// Output lines: "P <n>" records acknowledged, "C1 <n>" records the first
// consumer read, "C2 <value>..." what the second one read after the commit.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type logger struct{}

func (logger) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (logger) Log(level kgo.LogLevel, msg string, kv ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s %v\n", level, msg, kv)
}

func produce(seeds []string, topic, prefix string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.WithLogger(logger{}),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = kgo.StringRecord(fmt.Sprintf("%s-%d", prefix, i))
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return err
	}
	fmt.Printf("P %d\n", n)
	return nil
}

var next848 = flag.Bool("848", false, "KIP-848 consumer protocol")

// consume reads want records in group, commits them, and returns their values.
func consume(seeds []string, topic, group string, want int) ([]string, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.WithLogger(logger{}),
		kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if *next848 {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("read %d of %d: %w", len(got), want, err)
		}
		for _, e := range fs.Errors() {
			return got, fmt.Errorf("fetch %s/%d: %w", e.Topic, e.Partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return got, err
	}
	return got, nil
}

func main() {
	b := flag.String("b", "", "bootstrap")
	topic := flag.String("t", "", "topic")
	group := flag.String("g", "", "group")
	n := flag.Int("n", 10, "records")
	flag.Parse()
	seeds := strings.Split(*b, ",")
	fail := func(err error) {
		fmt.Printf("E %v\n", err)
		os.Exit(1)
	}
	if err := produce(seeds, *topic, "first", *n); err != nil {
		fail(err)
	}
	got, err := consume(seeds, *topic, *group, *n)
	if err != nil {
		fail(err)
	}
	fmt.Printf("C1 %d\n", len(got))
	if err := produce(seeds, *topic, "second", 3); err != nil {
		fail(err)
	}
	got, err = consume(seeds, *topic, *group, 3)
	if err != nil {
		fail(err)
	}
	fmt.Printf("C2 %s\n", strings.Join(got, " "))
}
