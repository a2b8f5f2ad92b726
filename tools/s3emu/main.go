// s3emu: the S3 emulator of the production-shaped benchmark target (bench/README.md).
//
// A real S3 API over HTTP on one address, objects as files under DIR/BUCKET/KEY (put DIR
// on a tmpfs to keep uploads off the disk), every request authenticated with AWS
// Signature Version 4 against one access key and secret: a request signed with another
// secret, unsigned, or whose body does not match a signed x-amz-content-sha256 is refused
// (403 SignatureDoesNotMatch / InvalidAccessKeyId, 400 XAmzContentSHA256Mismatch).
//
// Served: PUT bucket; PUT, GET (with Range), HEAD, DELETE object; ListObjectsV2
// (prefix, max-keys, continuation-token, start-after); multipart uploads (initiate,
// upload part, complete, abort); GET / (the bucket list). Path-style URLs only. ETags are
// CRC-32C based, not MD5s: the emulator shares the benchmark's cores, and clients only
// echo ETags back. Requests are served concurrently (one goroutine per connection),
// which is why it takes PUTs several times faster than s3rver on two cores.
//
// usage: s3emu -dir DIR -addr 127.0.0.1:PORT [-access KEY] [-secret SECRET] [BUCKET...]
// Prints "ready PORT" once it listens; exits on SIGTERM/SIGINT, and once the process
// named by SKIFF_S3RVER_OWNER_PID (if set) is gone.
package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const uploadsDir = ".uploads" // multipart parts, DIR/.uploads/ID/N; not a bucket name

type server struct {
	dir, access, secret string
	etags               sync.Map // part path -> its ETag, for CompleteMultipartUpload
}

type s3err struct {
	status  int
	code    string
	message string
}

func (e *s3err) Error() string { return e.code + ": " + e.message }

func errf(status int, code, format string, a ...interface{}) *s3err {
	return &s3err{status, code, fmt.Sprintf(format, a...)}
}

func writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var e *s3err
	if !errors.As(err, &e) {
		e = errf(500, "InternalError", "%v", err)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(e.status)
	if r.Method != http.MethodHead {
		fmt.Fprintf(w, "%s<Error><Code>%s</Code><Message>%s</Message></Error>",
			xml.Header, e.code, xmlText(e.message))
	}
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func writeXML(w http.ResponseWriter, v interface{}) {
	out, err := xml.Marshal(v)
	if err != nil {
		w.WriteHeader(500)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}

func etagOf(sum uint32, size int64) string {
	return fmt.Sprintf("\"%08x%016x\"", sum, size)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.serve(w, r); err != nil {
		// Read what is left of a refused body (up to a part's worth): the client then
		// gets the error instead of a reset connection.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
		writeErr(w, r, err)
	}
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) error {
	payload, err := s.verify(r)
	if err != nil {
		return err
	}
	if payload != "" {
		r.Body = newHashCheck(r.Body, payload)
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key := path, ""
	if i := strings.IndexByte(path, '/'); i >= 0 {
		bucket, key = path[:i], path[i+1:]
	}
	q := r.URL.Query()
	switch {
	case bucket == "":
		if r.Method != http.MethodGet {
			return errf(405, "MethodNotAllowed", "%s /", r.Method)
		}
		return s.listBuckets(w)
	case !validName(bucket):
		return errf(400, "InvalidBucketName", "%q", bucket)
	case key == "":
		return s.bucketOp(w, r, bucket, q)
	case !validKey(key):
		return errf(400, "InvalidArgument", "key %q", key)
	}
	if _, err := os.Stat(filepath.Join(s.dir, bucket)); err != nil {
		return errf(404, "NoSuchBucket", "%s", bucket)
	}
	_, hasUploads := q["uploads"]
	uploadID := q.Get("uploadId")
	switch {
	case r.Method == http.MethodPost && hasUploads:
		return s.initiate(w, bucket, key)
	case r.Method == http.MethodPut && uploadID != "":
		return s.putPart(w, r, uploadID, q.Get("partNumber"))
	case r.Method == http.MethodPost && uploadID != "":
		return s.complete(w, r, bucket, key, uploadID)
	case r.Method == http.MethodDelete && uploadID != "":
		return s.abort(w, uploadID)
	case r.Method == http.MethodPut:
		if r.Header.Get("X-Amz-Copy-Source") != "" {
			return errf(501, "NotImplemented", "copy")
		}
		return s.putObject(w, r, bucket, key)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return s.getObject(w, r, bucket, key)
	case r.Method == http.MethodDelete:
		err := os.Remove(filepath.Join(s.dir, bucket, filepath.FromSlash(key)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		w.WriteHeader(204)
		return nil
	}
	return errf(501, "NotImplemented", "%s %s", r.Method, r.URL.RequestURI())
}

func validName(b string) bool {
	return b != uploadsDir && !strings.ContainsAny(b, "/\\") && b != "." && b != ".."
}

// Keys become paths: no empty, "." or ".." segments, nothing that leaves the bucket.
func validKey(k string) bool {
	if len(k) > 1024 || strings.HasSuffix(k, "/") {
		return false
	}
	for _, seg := range strings.Split(k, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".s3emu-") {
			return false
		}
	}
	return true
}

func (s *server) bucketOp(w http.ResponseWriter, r *http.Request, bucket string, q map[string][]string) error {
	bdir := filepath.Join(s.dir, bucket)
	switch r.Method {
	case http.MethodPut:
		if err := os.MkdirAll(bdir, 0o755); err != nil {
			return err
		}
		w.WriteHeader(200)
		return nil
	case http.MethodHead, http.MethodGet:
		if _, err := os.Stat(bdir); err != nil {
			return errf(404, "NoSuchBucket", "%s", bucket)
		}
		if r.Method == http.MethodHead {
			w.WriteHeader(200)
			return nil
		}
		if get(q, "list-type") != "2" {
			return errf(501, "NotImplemented", "only ListObjectsV2 (list-type=2)")
		}
		return s.list(w, bucket, q)
	}
	return errf(501, "NotImplemented", "%s on a bucket", r.Method)
}

func get(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *server) listBuckets(w http.ResponseWriter) error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	type bucket struct {
		Name         string
		CreationDate string
	}
	var res struct {
		XMLName xml.Name `xml:"ListAllMyBucketsResult"`
		Buckets []bucket `xml:"Buckets>Bucket"`
	}
	for _, e := range ents {
		if e.IsDir() && validName(e.Name()) {
			res.Buckets = append(res.Buckets, bucket{e.Name(), time.Now().UTC().Format(time.RFC3339)})
		}
	}
	writeXML(w, &res)
	return nil
}

type listEntry struct {
	Key          string
	LastModified string
	ETag         string
	Size         int64
	StorageClass string
}

// ListObjectsV2 without delimiter: the bucket's keys are walked in order on each call
// (the benchmark lists rarely and keeps few objects); the continuation token is the
// last key returned, hex-encoded.
func (s *server) list(w http.ResponseWriter, bucket string, q map[string][]string) error {
	prefix := get(q, "prefix")
	if get(q, "delimiter") != "" {
		return errf(501, "NotImplemented", "delimiter")
	}
	maxKeys := 1000
	if v := get(q, "max-keys"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errf(400, "InvalidArgument", "max-keys %q", v)
		}
		if n < maxKeys {
			maxKeys = n
		}
	}
	after := get(q, "start-after")
	if t := get(q, "continuation-token"); t != "" {
		b, err := hex.DecodeString(t)
		if err != nil {
			return errf(400, "InvalidArgument", "continuation-token")
		}
		after = string(b)
	}
	bdir := filepath.Join(s.dir, bucket)
	var keys []listEntry
	err := filepath.WalkDir(bdir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != bdir {
				return nil // removed while walking
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".s3emu-") {
			return nil
		}
		rel, _ := filepath.Rel(bdir, p)
		k := filepath.ToSlash(rel)
		if !strings.HasPrefix(k, prefix) || k <= after {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		keys = append(keys, listEntry{k, info.ModTime().UTC().Format("2006-01-02T15:04:05.000Z"),
			"", info.Size(), "STANDARD"})
		return nil
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errf(404, "NoSuchBucket", "%s", bucket)
		}
		return err
	}
	// WalkDir's lexical order per directory is not the keys' order ("a/b" vs "a-b").
	sort.Slice(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	var res struct {
		XMLName               xml.Name `xml:"ListBucketResult"`
		Name                  string
		Prefix                string
		KeyCount              int
		MaxKeys               int
		IsTruncated           bool
		ContinuationToken     string      `xml:",omitempty"`
		NextContinuationToken string      `xml:",omitempty"`
		Contents              []listEntry `xml:"Contents"`
	}
	res.Name, res.Prefix, res.MaxKeys = bucket, prefix, maxKeys
	res.ContinuationToken = get(q, "continuation-token")
	if len(keys) > maxKeys {
		keys = keys[:maxKeys]
		res.IsTruncated = true
		res.NextContinuationToken = hex.EncodeToString([]byte(keys[len(keys)-1].Key))
	}
	for i := range keys {
		keys[i].ETag = etagOf(0, keys[i].Size)
	}
	res.Contents, res.KeyCount = keys, len(keys)
	writeXML(w, &res)
	return nil
}

// writeFile has fill write a temporary file beside dst and renames it into place:
// readers see the old object or the whole new one.
func writeFile(dst string, fill func(*os.File) error) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".s3emu-")
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// writeBody stores a request body at dst; its ETag is its CRC-32C and size.
func writeBody(dst string, body io.Reader) (string, error) {
	h := crc32.New(castagnoli)
	var n int64
	err := writeFile(dst, func(f *os.File) (err error) {
		n, err = io.Copy(f, io.TeeReader(body, h))
		return err
	})
	return etagOf(h.Sum32(), n), err
}

func (s *server) putObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	etag, err := writeBody(filepath.Join(s.dir, bucket, filepath.FromSlash(key)), r.Body)
	if err != nil {
		return err
	}
	w.Header()["ETag"] = []string{etag} // as S3 spells it
	w.WriteHeader(200)
	return nil
}

func (s *server) getObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	f, err := os.Open(filepath.Join(s.dir, bucket, filepath.FromSlash(key)))
	if err != nil {
		return errf(404, "NoSuchKey", "%s", key)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.IsDir() {
		return errf(404, "NoSuchKey", "%s", key)
	}
	size := info.Size()
	h := w.Header()
	h["ETag"] = []string{etagOf(0, size)}
	h.Set("Last-Modified", info.ModTime().UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
	off, n := int64(0), size
	status := 200
	if rg := r.Header.Get("Range"); rg != "" {
		var ok bool
		off, n, ok = parseRange(rg, size)
		if !ok {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			return errf(416, "InvalidRange", "%s of %d bytes", rg, size)
		}
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size))
		status = 206
	}
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	_, _ = io.Copy(w, io.NewSectionReader(f, off, n))
	return nil
}

// parseRange takes one "bytes=a-b", "bytes=a-" or "bytes=-n" range.
func parseRange(rg string, size int64) (int64, int64, bool) {
	spec := strings.TrimPrefix(rg, "bytes=")
	if spec == rg || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, false
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 || size == 0 {
			return 0, 0, false
		}
		if n > size {
			n = size
		}
		return size - n, n, true
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 || first >= size {
		return 0, 0, false
	}
	last := size - 1
	if b != "" {
		l, err := strconv.ParseInt(b, 10, 64)
		if err != nil || l < first {
			return 0, 0, false
		}
		if l < last {
			last = l
		}
	}
	return first, last - first + 1, true
}

// ----------------------------------------------------------------- multipart

func (s *server) uploadDir(id string) (string, error) {
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", errf(404, "NoSuchUpload", "%s", id)
	}
	d := filepath.Join(s.dir, uploadsDir, id)
	if _, err := os.Stat(d); err != nil {
		return "", errf(404, "NoSuchUpload", "%s", id)
	}
	return d, nil
}

func (s *server) initiate(w http.ResponseWriter, bucket, key string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	id := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Join(s.dir, uploadsDir, id), 0o755); err != nil {
		return err
	}
	writeXML(w, &struct {
		XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
		Bucket   string
		Key      string
		UploadId string
	}{Bucket: bucket, Key: key, UploadId: id})
	return nil
}

func (s *server) putPart(w http.ResponseWriter, r *http.Request, id, num string) error {
	d, err := s.uploadDir(id)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 10000 {
		return errf(400, "InvalidArgument", "partNumber %q", num)
	}
	etag, err := writeBody(filepath.Join(d, strconv.Itoa(n)), r.Body)
	if err != nil {
		return err
	}
	s.etags.Store(filepath.Join(d, strconv.Itoa(n)), etag)
	w.Header()["ETag"] = []string{etag} // as S3 spells it
	w.WriteHeader(200)
	return nil
}

func (s *server) complete(w http.ResponseWriter, r *http.Request, bucket, key, id string) error {
	d, err := s.uploadDir(id)
	if err != nil {
		return err
	}
	var req struct {
		Parts []struct {
			PartNumber int
			ETag       string
		} `xml:"Part"`
	}
	if err := xml.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || len(req.Parts) == 0 {
		return errf(400, "MalformedXML", "CompleteMultipartUpload")
	}
	paths := make([]string, len(req.Parts))
	etags := crc32.New(castagnoli)
	for i, p := range req.Parts {
		if i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber {
			return errf(400, "InvalidPartOrder", "part %d", p.PartNumber)
		}
		paths[i] = filepath.Join(d, strconv.Itoa(p.PartNumber))
		have, ok := s.etags.Load(paths[i])
		if !ok || strings.Trim(have.(string), "\"") != strings.Trim(p.ETag, "\"") {
			return errf(400, "InvalidPart", "part %d: ETag %s", p.PartNumber, p.ETag)
		}
		etags.Write([]byte(have.(string)))
	}
	err = writeFile(filepath.Join(s.dir, bucket, filepath.FromSlash(key)), func(f *os.File) error {
		return concat(f, paths)
	})
	if err != nil {
		return err
	}
	s.dropUpload(d)
	writeXML(w, &struct {
		XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
		Bucket  string
		Key     string
		ETag    string
	}{Bucket: bucket, Key: key, ETag: fmt.Sprintf("\"%08x-%d\"", etags.Sum32(), len(paths))})
	return nil
}

// concat appends the files to f in the kernel (copy_file_range), not through user space.
func concat(f *os.File, paths []string) error {
	for _, p := range paths {
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = f.ReadFrom(in)
		in.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *server) dropUpload(d string) {
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		s.etags.Delete(filepath.Join(d, e.Name()))
	}
	os.RemoveAll(d)
}

func (s *server) abort(w http.ResponseWriter, id string) error {
	d, err := s.uploadDir(id)
	if err != nil {
		return err
	}
	s.dropUpload(d)
	w.WriteHeader(204)
	return nil
}

// -------------------------------------------------------------- SigV4

// hashCheck fails the body's last read when its SHA-256 is not the signed one.
type hashCheck struct {
	body io.ReadCloser
	h    hash.Hash
	want string
}

func newHashCheck(body io.ReadCloser, want string) io.ReadCloser {
	return &hashCheck{body, sha256.New(), want}
}

func (c *hashCheck) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	c.h.Write(p[:n])
	if err == io.EOF && hex.EncodeToString(c.h.Sum(nil)) != c.want {
		return n, errf(400, "XAmzContentSHA256Mismatch", "the body does not match x-amz-content-sha256")
	}
	return n, err
}

func (c *hashCheck) Close() error { return c.body.Close() }

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// verify checks the Authorization header (AWS4-HMAC-SHA256, signed headers) and
// returns the body's signed SHA-256, or "" when the payload is UNSIGNED-PAYLOAD.
func (s *server) verify(r *http.Request) (string, error) {
	auth := r.Header.Get("Authorization")
	rest := strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 ")
	if rest == auth {
		return "", errf(403, "AccessDenied", "a SigV4 Authorization header is required")
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 5 || cred[3] != "s3" || cred[4] != "aws4_request" {
		return "", errf(403, "AuthorizationHeaderMalformed", "Credential %q", fields["Credential"])
	}
	if cred[0] != s.access {
		return "", errf(403, "InvalidAccessKeyId", "%s", cred[0])
	}
	amzDate := r.Header.Get("X-Amz-Date")
	t, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, cred[1]) {
		return "", errf(403, "AccessDenied", "x-amz-date %q", amzDate)
	}
	if d := time.Since(t); d > 15*time.Minute || d < -15*time.Minute {
		return "", errf(403, "RequestTimeTooSkewed", "x-amz-date %s", amzDate)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return "", errf(400, "InvalidRequest", "x-amz-content-sha256 is required")
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	hasHost := false
	var canon strings.Builder
	canon.WriteString(r.Method + "\n" + canonicalURI(r) + "\n" + canonicalQuery(r) + "\n")
	for _, name := range signed {
		var v string
		switch name {
		case "host":
			v, hasHost = r.Host, true
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			v = strings.Join(r.Header.Values(name), ",")
		}
		canon.WriteString(name + ":" + strings.Join(strings.Fields(v), " ") + "\n")
	}
	if !hasHost {
		return "", errf(403, "AccessDenied", "host is not signed")
	}
	canon.WriteString("\n" + fields["SignedHeaders"] + "\n" + payload)
	ch := sha256.Sum256([]byte(canon.String()))
	scope := strings.Join(cred[1:], "/")
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	k := []byte("AWS4" + s.secret)
	for _, p := range cred[1:] {
		k = hmacSHA256(k, p)
	}
	want := hex.EncodeToString(hmacSHA256(k, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "", errf(403, "SignatureDoesNotMatch", "the signature does not match the secret")
	}
	if payload == "UNSIGNED-PAYLOAD" {
		return "", nil
	}
	if len(payload) != 64 || strings.Trim(payload, "0123456789abcdef") != "" {
		return "", errf(400, "InvalidArgument", "x-amz-content-sha256 %q", payload)
	}
	return payload, nil
}

// S3 signs the path as sent, each segment URI-encoded once.
func canonicalURI(r *http.Request) string {
	segs := strings.Split(r.URL.Path, "/")
	for i, s := range segs {
		segs[i] = uriEncode(s)
	}
	return strings.Join(segs, "/")
}

func canonicalQuery(r *http.Request) string {
	q := r.URL.Query()
	parts := make([]string, 0, len(q))
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, uriEncode(k)+"="+uriEncode(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// ------------------------------------------------------------------ main

func main() {
	dir := flag.String("dir", "", "data directory (objects in DIR/BUCKET/KEY)")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	access := flag.String("access", "S3RVER", "access key id")
	secret := flag.String("secret", "S3RVER", "secret access key")
	flag.Parse()
	if *dir == "" {
		log.Fatal("usage: s3emu -dir DIR -addr HOST:PORT [-access K] [-secret S] [BUCKET...]")
	}
	for _, b := range flag.Args() {
		if !validName(b) {
			log.Fatalf("bad bucket name %q", b)
		}
		if err := os.MkdirAll(filepath.Join(*dir, b), 0o755); err != nil {
			log.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: &server{dir: *dir, access: *access, secret: *secret}, ReadHeaderTimeout: time.Minute}
	go watchOwner(srv)
	fmt.Printf("ready %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// watchOwner exits on SIGTERM/SIGINT, or once SKIFF_S3RVER_OWNER_PID's process is gone.
func watchOwner(srv *http.Server) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	owner, _ := strconv.Atoi(os.Getenv("SKIFF_S3RVER_OWNER_PID"))
	tick := time.NewTicker(time.Second)
	for {
		select {
		case <-sig:
			srv.Close()
			os.Exit(0)
		case <-tick.C:
			if owner > 0 && syscall.Kill(owner, 0) == syscall.ESRCH {
				srv.Close()
				os.Exit(0)
			}
		}
	}
}
