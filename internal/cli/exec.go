package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Execute runs c as a whole command line (args without the program's name) and returns the
// exit code: 0; an ExitCode's own (its message already printed); 2 on a bad command line; 1
// otherwise. The binary and the companion packages' Main functions share it, so both end alike.
func Execute(ctx context.Context, c *cobra.Command, args []string, stdout, stderr io.Writer) int {
	c.SetArgs(goStyleFlags(c, args))
	c.SetOut(stdout)
	c.SetErr(stderr)
	// Errors are printed once, below, with the exit code they map to; no usage dump after them.
	c.SilenceUsage = true
	c.SilenceErrors = true
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	cmd, err := c.ExecuteContextC(ctx)
	var code ExitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	fmt.Fprintf(stderr, "%s: %v\n", c.Name(), err)
	if !IsUsage(err) {
		return 1
	}
	if cmd == nil {
		cmd = c
	}
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return 2
}

// NeedSubcommand is the RunE of a command that only groups others (its Args rejecting unknown
// words): called alone it prints its usage to stderr and ends as a bad command line.
func NeedSubcommand(c *cobra.Command, _ []string) error {
	fmt.Fprint(c.ErrOrStderr(), c.UsageString())
	return ExitCode(2)
}

// goStyleFlags rewrites -name and -name=value to --name…, for the long flags of c's tree: the
// companion commands parsed their flags with the standard library before cobra, which takes
// either dash, and scripts may still pass one. Single letters stay shorthands, and names no
// command has stay as they are (-owide is -o wide). Nothing after "--" is touched.
func goStyleFlags(c *cobra.Command, args []string) []string {
	long := map[string]bool{"help": true} // cobra adds -h/--help when it runs
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(c)
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		if name, _, _ := strings.Cut(a[1:], "="); long[name] {
			out[i] = "-" + a
		}
	}
	return out
}
