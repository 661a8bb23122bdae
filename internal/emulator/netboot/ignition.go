package netboot

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/metalhub/metalhub/internal/discovery"
)

// config is the part of a Butane (YAML) or Ignition (JSON) config a booted machine needs to
// start metalprobe: unit command lines and files.
type config struct {
	Systemd struct {
		Units []struct {
			Contents string `json:"contents"`
			Dropins  []struct {
				Contents string `json:"contents"`
			} `json:"dropins"`
		} `json:"units"`
	} `json:"systemd"`
	Storage struct {
		Files []struct {
			Path     string `json:"path"`
			Contents struct {
				Inline string `json:"inline"` // Butane
				Source string `json:"source"` // Ignition: a data: URL
			} `json:"contents"`
		} `json:"files"`
	} `json:"storage"`
}

var flagPattern = regexp.MustCompile(`--(registry-url|server-uuid|token|token-file|clean)[= ]([^\s"'\\]+)`)

// ParseIgnition reads what the discovery OS would act on from a rendered ignition: the
// arguments of metalprobe in a systemd unit, and the token from --token or from the file that
// --token-file names. It understands the default template and custom ones that keep these flags.
func ParseIgnition(data []byte) (discovery.Params, error) {
	var p discovery.Params
	var cfg config
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return p, fmt.Errorf("parsing ignition: %w", err)
	}
	var tokenFile string
	for _, u := range cfg.Systemd.Units {
		texts := []string{u.Contents}
		for _, d := range u.Dropins {
			texts = append(texts, d.Contents)
		}
		for _, text := range texts {
			for _, m := range flagPattern.FindAllStringSubmatch(text, -1) {
				switch m[1] {
				case "registry-url":
					p.RegistryURL = m[2]
				case "server-uuid":
					p.ServerUUID = m[2]
				case "token":
					p.Token = m[2]
				case "token-file":
					tokenFile = m[2]
				case "clean":
					p.CleaningPolicy = m[2]
				}
			}
		}
	}
	if p.Token == "" && tokenFile != "" {
		for _, f := range cfg.Storage.Files {
			if f.Path != tokenFile {
				continue
			}
			content, err := fileContent(f.Contents.Inline, f.Contents.Source)
			if err != nil {
				return p, fmt.Errorf("reading %s from the ignition: %w", tokenFile, err)
			}
			p.Token = strings.TrimSpace(content)
		}
	}
	if p.RegistryURL == "" {
		return p, errors.New("ignition starts no metalprobe with --registry-url")
	}
	return p, nil
}

// fileContent decodes a Butane inline content or an Ignition data: URL.
func fileContent(inline, source string) (string, error) {
	if source == "" {
		return inline, nil
	}
	rest, ok := strings.CutPrefix(source, "data:")
	if !ok {
		return "", fmt.Errorf("source %q is not a data URL", source)
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return "", errors.New("data URL without a comma")
	}
	if strings.HasSuffix(meta, ";base64") {
		b, err := base64.StdEncoding.DecodeString(payload)
		return string(b), err
	}
	return url.PathUnescape(payload)
}
