package recovery

// A Decision in the journal and in -o json: its shared fields, and beside
// them the fields of the type's own decision, read back through the type
// the decision names (see IncidentType.Decided).

import "encoding/json"

// decisionJSON is a Decision's shared fields as JSON.
type decisionJSON Decision

// MarshalJSON writes the shared fields, then the type's own beside them.
func (d Decision) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(decisionJSON(d))
	if err != nil || d.Of == nil {
		return b, err
	}
	own, err := json.Marshal(d.Of)
	if err != nil {
		return nil, err
	}
	if len(own) < 2 || own[0] != '{' || string(own) == "{}" {
		return b, nil
	}
	return append(append(b[:len(b)-1], ','), own[1:]...), nil
}

// UnmarshalJSON reads the shared fields, then the type's own from the same
// object: a journal written before types owned their decisions reads the
// same way (its type named by the verdict when it names none).
func (d *Decision) UnmarshalJSON(b []byte) error {
	var c decisionJSON
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	*d = Decision(c)
	if t := d.incidentType(); t != nil && t.Decided != nil {
		own := t.Decided()
		if err := json.Unmarshal(b, own); err != nil {
			return err
		}
		d.Of = own
	}
	return nil
}
