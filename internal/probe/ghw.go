package probe

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/jaypipes/ghw"
)

// ghwArgs are the arguments of every ghw call: the probe's root, no external tools, and ghw's
// messages on the probe's logger.
func ghwArgs(ctx context.Context, fs sysfs) []any {
	return []any{
		// A context given first replaces the one ghw builds from GHW_* environment variables,
		// so that only the options below apply.
		ctx,
		ghw.WithChroot(fs.root),
		// ghw runs the host's ethtool and the like when tools are on, even under a chroot.
		ghw.WithDisableTools(),
		ghw.WithLogger(slog.New(ghwLogHandler{logr.ToSlogHandler(fs.log.V(1))})),
	}
}

// ghwLogHandler passes every ghw message at Info to a handler made from a V(1) logger: ghw
// warns about each sysfs file it misses, which is normal (see sysfs.read), and its default
// logger writes to stderr.
type ghwLogHandler struct{ slog.Handler }

func (h ghwLogHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelInfo)
}

func (h ghwLogHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelInfo
	return h.Handler.Handle(ctx, r)
}

func (h ghwLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return ghwLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h ghwLogHandler) WithGroup(name string) slog.Handler {
	return ghwLogHandler{h.Handler.WithGroup(name)}
}
