package broker

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMirrorAnswersEveryAPI is what keeps the one generic refusal filler
// (mirror, behind denyAll, notCoordinator and forwarding failures) instead
// of a hand-written refusal per API: for every registered API, at every
// version it advertises, a request with two entries in each list (and two
// in each nested list) is refused with a code, and the answer must encode
// and decode at that version, carry the code in every error field, and
// hold one entry per request entry wherever the request lists entries
// under the response's name. A new API, or a new kmsg field, that the
// filler does not answer fails here.
func TestMirrorAnswersEveryAPI(t *testing.T) {
	const code = 7 // REQUEST_TIMED_OUT: any non-zero code
	for key, a := range apis {
		if a.byConnection {
			continue
		}
		for v := a.versions.Min; v <= a.versions.Max; v++ {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			fillLists(reflect.ValueOf(req).Elem(), 2)
			resp := denyAll(req, code)
			resp.SetVersion(v)
			name := kmsg.NameForKey(key)

			back := req.ResponseKind()
			back.SetVersion(v)
			if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
				t.Errorf("%s v%d: the refusal does not decode: %v", name, v, err)
				continue
			}
			// Which error fields exist at v: set them all and see which
			// survive an encoding at v. The refusal must equal that.
			forced := req.ResponseKind()
			forced.SetVersion(v)
			if err := forced.ReadFrom(resp.AppendTo(nil)); err != nil {
				t.Fatal(err)
			}
			setCodes(reflect.ValueOf(forced).Elem(), code)
			want := req.ResponseKind()
			want.SetVersion(v)
			if err := want.ReadFrom(forced.AppendTo(nil)); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, want) {
				t.Errorf("%s v%d: an error field of the refusal is not %d:\n got %+v\nwant %+v", name, v, code, back, want)
			}
			checkEntries(t, name, v, reflect.ValueOf(req).Elem(), reflect.ValueOf(resp).Elem())
		}
	}
}

// fillLists gives every list of structs or plain values n default entries,
// recursively, so a refusal has entries to mirror.
func fillLists(v reflect.Value, n int) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() == reflect.Uint8 {
			continue
		}
		s := reflect.MakeSlice(f.Type(), n, n)
		for j := 0; j < n; j++ {
			e := s.Index(j)
			if e.Kind() == reflect.Struct {
				if d := e.Addr().MethodByName("Default"); d.IsValid() {
					d.Call(nil)
				}
				fillLists(e, n)
			}
		}
		f.Set(s)
	}
}

// setCodes sets every ErrorCode, at any depth, to code.
func setCodes(r reflect.Value, code int16) {
	for i := 0; i < r.NumField(); i++ {
		f, sf := r.Field(i), r.Type().Field(i)
		switch {
		case sf.Name == "ErrorCode" && f.Kind() == reflect.Int16:
			f.SetInt(int64(code))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct:
			for j := 0; j < f.Len(); j++ {
				setCodes(f.Index(j), code)
			}
		}
	}
}

// checkEntries: every response list whose request counterpart (same
// name, or an alias) holds entries has as many entries.
func checkEntries(t *testing.T, name string, v int16, req, resp reflect.Value) {
	t.Helper()
	for i := 0; i < resp.NumField(); i++ {
		f, sf := resp.Field(i), resp.Type().Field(i)
		if f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Struct {
			continue
		}
		for _, rn := range append([]string{sf.Name}, mirrorAliases[sf.Name]...) {
			rq := req.FieldByName(rn)
			if !rq.IsValid() || rq.Kind() != reflect.Slice || rq.Len() == 0 {
				continue
			}
			if f.Len() != rq.Len() {
				t.Errorf("%s v%d: %s has %d entries for the request's %d", name, v, sf.Name, f.Len(), rq.Len())
			}
			for j := 0; j < min(f.Len(), rq.Len()); j++ {
				if rq.Index(j).Kind() == reflect.Struct {
					checkEntries(t, name, v, rq.Index(j), f.Index(j))
				}
			}
			break
		}
	}
}
