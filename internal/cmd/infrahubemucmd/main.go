// Package infrahubemucmd runs the Infrahub emulator as a standalone server
// (wired as `metalhub emulate infrahub`), for dev mode, manual testing with
// the vidra against-fake samples, and out-of-process benchmarks.
//
// It only parses flags and serves: what the emulator answers is internal/emulator/infrahub's, and
// it touches no cluster.
package infrahubemucmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metalhub/metalhub/internal/cli"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// Main parses args (without "emulate infrahub"), serves until ctx is
// cancelled and returns the exit code: 0 on a clean stop, 2 for bad
// usage, 1 for any other failure.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, Command(), args, stdout, stderr)
}

// Command is "infrahub", to be added under "emulate".
func Command() *cobra.Command {
	var o options
	c := &cobra.Command{
		Use:   "infrahub [flags]",
		Short: "Infrahub API (login, stored queries, artifacts)",
		Long:  "Serves Infrahub's login, stored-query and artifact endpoints, plus /emulator/* controls.",
		Example: `  metalhub emulate infrahub --sample
  metalhub emulate infrahub --listen 127.0.0.1:0 --artifacts-dir ./artifacts --token dev-token`,
		Args: cobra.ExactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error { return o.run(c.Context(), c.OutOrStdout(), c.ErrOrStderr()) },
	}
	f := c.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8300", "address to serve on (port 0 picks a free one)")
	f.StringVar(&o.username, "username", emu.DefaultUsername, "user that may log in")
	f.StringVar(&o.password, "password", emu.DefaultPassword, "password of that user")
	f.StringVar(&o.dir, "artifacts-dir", "", "load artifacts from DIR/<artifact-name>.yaml|.yml|.json (main) and DIR/<branch>/<artifact-name>.yaml; <name>--<suffix>.yaml lets several artifacts share a name")
	f.BoolVar(&o.sample, "sample", false, "load the sample artifacts (two Webserver_Manifest on main with history, branch feature-x)")
	f.DurationVar(&o.ttl, "access-token-ttl", emu.DefaultAccessTokenTTL, "lifetime of issued access tokens")
	f.BoolVar(&o.anonymous, "allow-anonymous-read", false, "let unauthenticated GETs through, as Infrahub's allow_anonymous_access")
	f.Var(&o.tokens, "token", "API token accepted as X-INFRAHUB-KEY (repeatable)")
	f.Var(&o.queries, "query", "stored query name to serve (repeatable; default "+emu.DefaultQuery+")")
	return c
}

type options struct {
	listen, username, password, dir string
	sample, anonymous               bool
	ttl                             time.Duration
	tokens, queries                 multiFlag
}

func (o *options) run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.username == "" || o.password == "" {
		return cli.Usage(errors.New("--username and --password must not be empty"))
	}

	e := emu.New(emu.Options{
		Users:              map[string]string{o.username: o.password},
		APITokens:          o.tokens,
		AccessTokenTTL:     o.ttl,
		Queries:            []string(o.queries),
		AllowAnonymousRead: o.anonymous,
	})
	if o.sample {
		if err := e.LoadSample(); err != nil {
			fmt.Fprintf(stderr, "load sample: %v\n", err)
			return cli.ExitCode(1)
		}
	}
	if o.dir != "" {
		if err := e.LoadDir(o.dir); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return cli.ExitCode(1)
		}
	}
	url, err := e.Start(o.listen)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return cli.ExitCode(1)
	}
	defer func() { _ = e.Close() }()

	fmt.Fprintf(stdout, "infrahub emulator listening on %s\n", url)
	fmt.Fprintf(stdout, "  username: %s\n  password: %s\n", o.username, o.password)
	for _, t := range o.tokens {
		fmt.Fprintf(stdout, "  api token (X-INFRAHUB-KEY): %s\n", t)
	}
	qs := []string(o.queries)
	if len(qs) == 0 {
		qs = []string{emu.DefaultQuery}
	}
	fmt.Fprintf(stdout, "  queries: %s\n", strings.Join(qs, ", "))
	for _, b := range e.Branches() {
		arts, _ := e.Artifacts(b, time.Time{})
		names := make([]string, 0, len(arts))
		for _, a := range arts {
			names = append(names, a.Name+"="+a.ID)
		}
		fmt.Fprintf(stdout, "  branch %s: %d artifacts %s\n", b, len(arts), strings.Join(names, " "))
	}
	fmt.Fprintf(stdout, "  request log: %s/emulator/requests\n", url)

	<-ctx.Done()
	fmt.Fprintln(stdout, "infrahub emulator stopping")
	return nil
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

// Type names the value in help, as pflag's own string flags do.
func (m *multiFlag) Type() string { return "string" }

func (m *multiFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	*m = append(*m, v)
	return nil
}
