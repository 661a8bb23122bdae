package infrahub

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SampleArtifactName is the name shared by the sample artifacts, as in the
// vidra against-fake InfrahubSync samples.
const SampleArtifactName = "Webserver_Manifest"

// SampleBranch is the sample's second branch.
const SampleBranch = "feature-x"

var (
	sampleV1Time     = time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)
	sampleV2Time     = time.Date(2025, 4, 15, 0, 0, 0, 0, time.UTC)
	sampleBranchTime = time.Date(2025, 4, 20, 0, 0, 0, 0, time.UTC)
)

func webA(version string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: ConfigMap
metadata:
  name: web-a
  labels:
    app: web-a
data:
  version: %q
  index.html: "<h1>web-a %s</h1>"
`, version, version)
}

const webB = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-b
  labels:
    app: web-b
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web-b
  template:
    metadata:
      labels:
        app: web-b
    spec:
      containers:
        - name: web
          image: nginx:1.27-alpine
          ports:
            - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web-b
  labels:
    app: web-b
spec:
  selector:
    app: web-b
  ports:
    - port: 80
      targetPort: 80
`

// LoadSample adds the example data the vidra against-fake samples expect:
// two artifacts named Webserver_Manifest on main (web-a, a ConfigMap, and
// web-b, a Deployment+Service), with history — on 2025-04-09 only web-a
// existed, in its v1 content — and branch feature-x with its own web-a.
func (e *Emulator) LoadSample() error {
	a, err := e.Apply(Change{Name: SampleArtifactName, Content: webA("v1"), At: sampleV1Time})
	if err != nil {
		return fmt.Errorf("sample web-a: %w", err)
	}
	if _, err := e.Apply(Change{ID: a.ID, Content: webA("v2"), At: sampleV2Time}); err != nil {
		return fmt.Errorf("sample web-a v2: %w", err)
	}
	if _, err := e.Apply(Change{Name: SampleArtifactName, Content: []byte(webB), At: sampleV2Time}); err != nil {
		return fmt.Errorf("sample web-b: %w", err)
	}
	if err := e.AddBranch(SampleBranch); err != nil {
		return err
	}
	if _, err := e.Apply(Change{Branch: SampleBranch, ID: a.ID, Content: webA(SampleBranch), At: sampleBranchTime}); err != nil {
		return fmt.Errorf("sample %s web-a: %w", SampleBranch, err)
	}
	return nil
}

// LoadDir adds one artifact per file: DIR/<name>.yaml (or .yml, .json) on
// main and DIR/<branch>/<name>.yaml on that branch. Several artifacts may
// share a name as <name>--<anything>.yaml. A file in a branch directory whose
// name matches an artifact on main becomes that branch's version of it.
func (e *Emulator) LoadDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("load artifacts: %w", err)
	}
	mainIDs := map[string]string{} // file key -> id on main
	var branches []string
	for _, ent := range entries {
		if ent.IsDir() {
			if !strings.HasPrefix(ent.Name(), ".") {
				branches = append(branches, ent.Name())
			}
			continue
		}
		key, name, ctype, ok := artifactFile(ent.Name())
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			return fmt.Errorf("load artifacts: %w", err)
		}
		a, err := e.Apply(Change{Name: name, ContentType: ctype, Content: data})
		if err != nil {
			return fmt.Errorf("load artifact %s: %w", ent.Name(), err)
		}
		mainIDs[key] = a.ID
	}
	sort.Strings(branches)
	for _, b := range branches {
		if err := e.AddBranch(b); err != nil {
			return err
		}
		files, err := os.ReadDir(filepath.Join(dir, b))
		if err != nil {
			return fmt.Errorf("load artifacts of branch %s: %w", b, err)
		}
		for _, f := range files {
			key, name, ctype, ok := artifactFile(f.Name())
			if !ok || f.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, b, f.Name()))
			if err != nil {
				return fmt.Errorf("load artifacts: %w", err)
			}
			ch := Change{Branch: b, Name: name, ContentType: ctype, Content: data, ID: mainIDs[key]}
			if _, err := e.Apply(ch); err != nil {
				return fmt.Errorf("load artifact %s/%s: %w", b, f.Name(), err)
			}
		}
	}
	return nil
}

func artifactFile(file string) (key, name, contentType string, ok bool) {
	ext := strings.ToLower(filepath.Ext(file))
	switch ext {
	case ".yaml", ".yml":
		contentType = "application/yaml"
	case ".json":
		contentType = "application/json"
	default:
		return "", "", "", false
	}
	key = strings.TrimSuffix(file, filepath.Ext(file))
	name, _, _ = strings.Cut(key, "--")
	if name == "" {
		return "", "", "", false
	}
	return key, name, contentType, true
}
