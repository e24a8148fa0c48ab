package fraud

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Epoch is when the generated transactions start.
var Epoch = time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)

// MaxDelay bounds how late a transaction reaches the stream after it
// happened; the job's watermark trails the transactions by as much, so
// that none is late.
const MaxDelay = 30 * time.Second

// Tx is a card transaction.
type Tx struct {
	ID     int64
	Card   string // "card-0042"
	At     time.Time
	City   string
	Amount int64         // cents
	Delay  time.Duration // it reached the stream at At+Delay
}

// EventTime returns when the transaction happened.
func (t Tx) EventTime() time.Time { return t.At }

// Stolen is a card reported stolen by its owner.
type Stolen struct {
	ID   int64
	Card string
	At   time.Time
}

// EventTime returns when the card was reported stolen.
func (s Stolen) EventTime() time.Time { return s.At }

// City is a place where cards are used.
type City struct {
	Name     string
	Lat, Lon float64 // degrees
}

// Cities are the places of the transactions: the first twelve, in Europe,
// are the cards' home cities; several of them are within 500 km of each
// other.
var Cities = []City{
	{"Paris", 48.8566, 2.3522}, {"London", 51.5074, -0.1278}, {"Brussels", 50.8503, 4.3517},
	{"Amsterdam", 52.3676, 4.9041}, {"Cologne", 50.9375, 6.9603}, {"Frankfurt", 50.1109, 8.6821},
	{"Munich", 48.1351, 11.5820}, {"Lyon", 45.7640, 4.8357}, {"Geneva", 46.2044, 6.1432},
	{"Milan", 45.4642, 9.1900}, {"Madrid", 40.4168, -3.7038}, {"Rome", 41.9028, 12.4964},
	{"New York", 40.7128, -74.0060}, {"Tokyo", 35.6762, 139.6503}, {"Sao Paulo", -23.5505, -46.6333},
	{"Sydney", -33.8688, 151.2093},
}

const homeCities = 12

var cityIndex = func() map[string]int {
	m := make(map[string]int, len(Cities))
	for i, c := range Cities {
		m[c.Name] = i
	}
	return m
}()

// Km returns the great-circle distance between two of the Cities, rounded
// to the kilometre (0 for an unknown name).
func Km(a, b string) int {
	i, ok1 := cityIndex[a]
	j, ok2 := cityIndex[b]
	if !ok1 || !ok2 {
		return 0
	}
	return int(math.Round(haversine(Cities[i], Cities[j])))
}

func haversine(a, b City) float64 {
	const earthKm = 6371.0
	rad := math.Pi / 180
	dLat, dLon := (b.Lat-a.Lat)*rad, (b.Lon-a.Lon)*rad
	h := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(a.Lat*rad)*math.Cos(b.Lat*rad)*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * earthKm * math.Asin(math.Sqrt(h))
}

// Config describes the generated streams and the rules of the detection.
type Config struct {
	Cards        int
	Transactions int // ordinary transactions; the planted ones come on top
	Seed         uint64
	Stolen       int // cards reported stolen, each then used 1 to 3 times within After
	Trips        int // planted impossible trips: a card used far away within TravelWindow
	// After is how long after a card is reported stolen its transactions
	// raise an alert.
	After time.Duration
	// TravelWindow and DistanceKm: two transactions of a card more than
	// DistanceKm apart within TravelWindow raise an alert.
	TravelWindow time.Duration
	DistanceKm   int
}

// DefaultConfig is what `sluice run fraud` runs without flags.
func DefaultConfig() Config {
	return Config{Cards: 500, Transactions: 20_000, Seed: 1, Stolen: 20, Trips: 15,
		After: 30 * time.Minute, TravelWindow: time.Hour, DistanceKm: 500}
}

// Validate reports a configuration that cannot be generated or run.
func (c Config) Validate() error {
	var errs []error
	if c.Cards < 1 || c.Transactions < 1 {
		errs = append(errs, fmt.Errorf("cards %d, transactions %d: must be at least 1", c.Cards, c.Transactions))
	}
	if c.Stolen < 0 || c.Stolen > c.Cards || c.Trips < 0 || c.Trips > c.Transactions {
		errs = append(errs, fmt.Errorf("stolen %d, trips %d: must be between 0 and the cards, the transactions", c.Stolen, c.Trips))
	}
	if c.After < 0 {
		errs = append(errs, fmt.Errorf("after %v: must not be negative", c.After))
	}
	if c.TravelWindow < 10*time.Second {
		errs = append(errs, fmt.Errorf("travel window %v: must be at least 10s", c.TravelWindow))
	}
	if c.DistanceKm < 0 || c.DistanceKm >= 9000 {
		errs = append(errs, fmt.Errorf("distance %d km: must be between 0 and 9000", c.DistanceKm))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fraud: %w", err)
	}
	return nil
}

// Kinds of alerts and planted cases.
const (
	KindStolen = "stolen-card"       // a transaction within After of the card's report
	KindTravel = "impossible-travel" // two transactions too far apart too soon
)

// Case is a planted fraud: Tx must raise an alert of Kind whose cause is
// Cause (the Stolen report's ID, or the earlier transaction's).
type Case struct {
	Kind  string
	Card  string
	Tx    int64
	Cause int64
}

// Data are the generated streams and the frauds planted in them.
type Data struct {
	Txs     []Tx     // in the order they arrive (event time plus delay)
	Reports []Stolen // in time order
	Planted []Case
}

// between draws a duration in [lo, hi], in whole milliseconds.
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	ms := int64((hi - lo) / time.Millisecond)
	if ms <= 0 {
		return lo.Truncate(time.Millisecond)
	}
	return lo.Truncate(time.Millisecond) + time.Duration(r.Int64N(ms+1))*time.Millisecond
}

// Generate returns the streams of cfg. It depends only on cfg.
//
// The ordinary transactions come every 3 s or so, each on a random card,
// in the card's current city. A card stays near home: one time in 25 it
// moves to a city within DistanceKm/2 of its home city (any two such
// cities are at most DistanceKm apart, so that alone raises no alert);
// one time in 50, if its last transaction is older than TravelWindow, it
// flies to any other city (which raises none either). Then come the
// planted frauds: Trips transactions each in a city more than DistanceKm
// away from a random transaction of the same card, and within TravelWindow
// after it; and Stolen cards reported stolen at a random time, each used
// one to three times within After of the report, in the city of its last
// transaction. Each planted transaction may also raise alerts with the
// card's other transactions around it. A third of the transactions reach
// the stream up to MaxDelay late.
func Generate(cfg Config) Data {
	if cfg.Validate() != nil {
		return Data{}
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6672617564))
	type card struct {
		home, city int
		last       time.Time
		history    []Tx // its ordinary transactions, in time order
	}
	cards := make([]card, cfg.Cards)
	for i := range cards {
		cards[i].home = r.IntN(homeCities)
		cards[i].city = cards[i].home
	}
	name := func(c int) string { return fmt.Sprintf("card-%04d", c) }
	const step = 3 * time.Second
	var d Data
	for i := range cfg.Transactions {
		at := Epoch.Add(time.Duration(i)*step + between(r, 0, step-time.Millisecond))
		c := r.IntN(cfg.Cards)
		cd := &cards[c]
		switch x := r.IntN(50); {
		case x < 2 && Km(Cities[cd.home].Name, Cities[cd.city].Name)*2 <= cfg.DistanceKm:
			near := append(citiesWithin(cd.home, cfg.DistanceKm/2), cd.home)
			cd.city = near[r.IntN(len(near))]
		case x == 2 && at.Sub(cd.last) > cfg.TravelWindow:
			cd.city = (cd.city + 1 + r.IntN(len(Cities)-1)) % len(Cities)
		}
		cd.last = at
		tx := Tx{ID: int64(i), Card: name(c), At: at, City: Cities[cd.city].Name, Amount: 100 + r.Int64N(20_000)}
		cd.history = append(cd.history, tx)
		d.Txs = append(d.Txs, tx)
	}
	span := time.Duration(cfg.Transactions) * step
	next := int64(cfg.Transactions)
	for range cfg.Trips {
		b := d.Txs[r.IntN(cfg.Transactions)]
		var far []int
		for j, c := range Cities {
			if Km(b.City, c.Name) > cfg.DistanceKm {
				far = append(far, j)
			}
		}
		at := b.At.Add(between(r, cfg.TravelWindow/10, cfg.TravelWindow*9/10))
		d.Txs = append(d.Txs, Tx{ID: next, Card: b.Card, At: at, City: Cities[far[r.IntN(len(far))]].Name, Amount: 50_000 + r.Int64N(200_000)})
		d.Planted = append(d.Planted, Case{Kind: KindTravel, Card: b.Card, Tx: next, Cause: b.ID})
		next++
	}
	for k, c := range r.Perm(cfg.Cards)[:cfg.Stolen] {
		rep := Stolen{ID: int64(k + 1), Card: name(c), At: Epoch.Add(between(r, 0, span))}
		d.Reports = append(d.Reports, rep)
		city := Cities[cards[c].home].Name
		h := cards[c].history
		if i, _ := slices.BinarySearchFunc(h, rep.At, func(t Tx, at time.Time) int { return t.At.Compare(at) }); i > 0 {
			city = h[i-1].City
		}
		for range 1 + r.IntN(3) {
			at := rep.At.Add(between(r, 0, cfg.After))
			d.Txs = append(d.Txs, Tx{ID: next, Card: rep.Card, At: at, City: city, Amount: 20_000 + r.Int64N(100_000)})
			d.Planted = append(d.Planted, Case{Kind: KindStolen, Card: rep.Card, Tx: next, Cause: rep.ID})
			next++
		}
	}
	for i := range d.Txs {
		if r.IntN(3) == 0 {
			d.Txs[i].Delay = between(r, 0, MaxDelay)
		}
	}
	slices.SortStableFunc(d.Txs, func(a, b Tx) int { return a.At.Add(a.Delay).Compare(b.At.Add(b.Delay)) })
	slices.SortStableFunc(d.Reports, func(a, b Stolen) int { return a.At.Compare(b.At) })
	return d
}

// citiesWithin returns the cities within km of city i, but not i.
func citiesWithin(i, km int) []int {
	var out []int
	for j, c := range Cities {
		if j != i && Km(Cities[i].Name, c.Name) <= km {
			out = append(out, j)
		}
	}
	return out
}
