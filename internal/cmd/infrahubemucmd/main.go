// Package infrahubemucmd runs the Infrahub emulator as a standalone server
// (wired as `metalhub emulate infrahub`), for dev mode, manual testing with
// the vidra against-fake samples, and out-of-process benchmarks.
package infrahubemucmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// Main parses args (without the program name), serves until ctx is
// cancelled and returns the exit code: 0 on a clean stop, 2 for bad
// usage, 1 for any other failure.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("emulate infrahub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen    = fs.String("listen", "127.0.0.1:8300", "address to serve on (port 0 picks a free one)")
		username  = fs.String("username", emu.DefaultUsername, "user that may log in")
		password  = fs.String("password", emu.DefaultPassword, "password of that user")
		dir       = fs.String("artifacts-dir", "", "load artifacts from DIR/<artifact-name>.yaml|.yml|.json (main) and DIR/<branch>/<artifact-name>.yaml; <name>--<suffix>.yaml lets several artifacts share a name")
		sample    = fs.Bool("sample", false, "load the sample artifacts (two Webserver_Manifest on main with history, branch feature-x)")
		ttl       = fs.Duration("access-token-ttl", emu.DefaultAccessTokenTTL, "lifetime of issued access tokens")
		anonymous = fs.Bool("allow-anonymous-read", false, "let unauthenticated GETs through, as Infrahub's allow_anonymous_access")
		tokens    multiFlag
		queries   multiFlag
	)
	fs.Var(&tokens, "token", "API token accepted as X-INFRAHUB-KEY (repeatable)")
	fs.Var(&queries, "query", "stored query name to serve (repeatable; default "+emu.DefaultQuery+")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: emulate infrahub [flags]\n\nServes Infrahub's login, stored-query and artifact endpoints, plus /emulator/* controls.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 2
	}
	if *username == "" || *password == "" {
		fmt.Fprintln(stderr, "--username and --password must not be empty")
		return 2
	}

	e := emu.New(emu.Options{
		Users:              map[string]string{*username: *password},
		APITokens:          tokens,
		AccessTokenTTL:     *ttl,
		Queries:            []string(queries),
		AllowAnonymousRead: *anonymous,
	})
	if *sample {
		if err := e.LoadSample(); err != nil {
			fmt.Fprintf(stderr, "load sample: %v\n", err)
			return 1
		}
	}
	if *dir != "" {
		if err := e.LoadDir(*dir); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return 1
		}
	}
	url, err := e.Start(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	defer func() { _ = e.Close() }()

	fmt.Fprintf(stdout, "infrahub emulator listening on %s\n", url)
	fmt.Fprintf(stdout, "  username: %s\n  password: %s\n", *username, *password)
	for _, t := range tokens {
		fmt.Fprintf(stdout, "  api token (X-INFRAHUB-KEY): %s\n", t)
	}
	qs := []string(queries)
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
	return 0
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	*m = append(*m, v)
	return nil
}
