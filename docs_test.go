package dedup

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink is an inline link's target: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// citation is a file of this repository named in code, a script or a
// deploy file: a page of docs/, a script, a deploy file, the model.
var citation = regexp.MustCompile(`\b(docs|deploy|scripts|model)/[A-Za-z0-9_./-]+\.(md|sh|yml|json|service|timer|env|pml)\b`)

// headingSlugs are the anchors GitHub makes of a Markdown file's headings.
func headingSlugs(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	slugs := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var s strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				s.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				s.WriteRune(r)
			}
		}
		slugs[s.String()] = true
	}
	return slugs
}

// TestEveryLinkInTheDocsResolves walks README.md and docs/ and fails on a
// relative link whose file does not exist, or whose #anchor names no
// heading of the page it points to.
func TestEveryLinkInTheDocsResolves(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", page, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !headingSlugs(t, path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, path, anchor)
			}
		}
	}
}

// TestEveryCitedFileExists fails on a file of docs/, deploy/, scripts/ or
// model/ named in a Go comment, a script or a deploy file (an alert rule's
// annotation) that does not exist.
func TestEveryCitedFileExists(t *testing.T) {
	cited := 0
	for _, root := range []string{".", "deploy", "scripts"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if root == "." && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "deploy" || d.Name() == "scripts" || d.Name() == "docs") {
					return filepath.SkipDir
				}
				return nil
			}
			if root == "." && !strings.HasSuffix(path, ".go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, doc := range citation.FindAllString(string(b), -1) {
				cited++
				if _, err := os.Stat(doc); err != nil {
					t.Errorf("%s cites %s, which does not exist", path, doc)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if cited == 0 {
		t.Fatal("no file cited anywhere: the walk read nothing")
	}
}

// repoPath is a path of this repository written in prose, code or a
// script: a top folder of the libraries, tests, docs or tools, then the
// rest. The character before it must not continue a path (so
// /usr/share/doc/dedup/... or a URL is not read as one).
var repoPath = regexp.MustCompile(`(^|[^A-Za-z0-9_./$-])((?:internal|ledger|lhstd|e2e|docs|deploy|scripts|model)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)

// placeholder is a path with a part in capitals: a pattern of paths.
var placeholder = regexp.MustCompile(`(^|/)[A-Z]+(/|$)`)

// sources are the files whose citations must resolve: the README and
// docs/, every Go file, the scripts and the deploy files.
func sources(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "dist" || d.Name() == "bin" || d.Name() == "static") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".go"), strings.HasPrefix(path, "scripts/"), strings.HasPrefix(path, "deploy/"),
			strings.HasPrefix(path, "docs/") && strings.HasSuffix(path, ".md"), path == "README.md":
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEveryRepositoryPathCitedExists fails on a path of this repository
// (internal/ included) named in the README, docs/, a Go file, a script or a
// deploy file that does not exist: a package moved or a file renamed
// leaves no pointer behind.
func TestEveryRepositoryPathCitedExists(t *testing.T) {
	cited := 0
	for _, path := range sources(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range repoPath.FindAllStringSubmatch(string(b), -1) {
			p := strings.TrimRight(m[2], ".")
			if placeholder.MatchString(p) {
				continue // internal/X, e2e/testdata/NAME: a pattern, not a path
			}
			cited++
			if _, err := os.Stat(p); err != nil {
				// A Go test cited as PACKAGE/TestName.
				dir, name := filepath.Split(p)
				if strings.HasPrefix(name, "Test") && dir != "" {
					if _, err := os.Stat(dir); err == nil {
						continue
					}
				}
				t.Errorf("%s cites %s, which does not exist", path, p)
			}
		}
	}
	if cited == 0 {
		t.Fatal("no repository path cited anywhere: the walk read nothing")
	}
}

// goNames are every test function's name, and every word that could name
// something in the sources (Go identifiers, conformance cases' names,
// alert rules, systemd settings).
func goNames(t *testing.T) (tests, words map[string]bool) {
	t.Helper()
	tests, words = map[string]bool{}, map[string]bool{}
	testFunc := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	word := regexp.MustCompile(`\b[A-Za-z_]\w*\b`)
	for _, path := range sources(t) {
		if strings.HasSuffix(path, ".md") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			tests[m[1]] = true
		}
		for _, w := range word.FindAllString(string(b), -1) {
			words[w] = true
		}
	}
	return tests, words
}

// TestEveryTestNameCitedInTheDocsExists fails on a test named in the
// README or docs/ that no test file defines: a `TestX` (or a `TestX…`
// prefix) must be a test function, and a conformance case or another
// CamelCase name in backquotes must be a name in the sources.
func TestEveryTestNameCitedInTheDocsExists(t *testing.T) {
	tests, words := goNames(t)
	quoted := regexp.MustCompile("`(?:[a-z]+/)*([A-Z][A-Za-z0-9_]*)(…)?`")
	camel := regexp.MustCompile(`^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*){3,}$`)
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, page := range append(pages, "README.md") {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
			name, prefix := m[1], m[2] != ""
			switch {
			case strings.HasPrefix(name, "Test") && len(name) > 4:
				checked++
				found := tests[name]
				for tn := range tests {
					if prefix && strings.HasPrefix(tn, name) {
						found = true
					}
				}
				if !found {
					t.Errorf("%s cites the test %s%s, which no test file defines", page, name, m[2])
				}
			case camel.MatchString(name):
				checked++
				if !words[name] {
					t.Errorf("%s cites %s, a name found nowhere in the sources", page, name)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no test name cited in the docs: the walk read nothing")
	}
}
