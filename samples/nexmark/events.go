package nexmark

// Person is a new user of the auction site.
type Person struct {
	ID           int64  `json:"id" msgpack:"id"`
	Name         string `json:"name" msgpack:"name"`
	EmailAddress string `json:"emailAddress" msgpack:"email"`
	CreditCard   string `json:"creditCard" msgpack:"card"`
	City         string `json:"city" msgpack:"city"`
	State        string `json:"state" msgpack:"state"`
	DateTime     int64  `json:"dateTime" msgpack:"ts"` // ms since the Unix epoch
	Extra        string `json:"extra" msgpack:"extra"`
}

// Auction is an item put up for sale.
type Auction struct {
	ID          int64  `json:"id" msgpack:"id"`
	ItemName    string `json:"itemName" msgpack:"item"`
	Description string `json:"description" msgpack:"desc"`
	InitialBid  int64  `json:"initialBid" msgpack:"initial"` // cents
	Reserve     int64  `json:"reserve" msgpack:"reserve"`    // cents
	DateTime    int64  `json:"dateTime" msgpack:"ts"`        // ms since the Unix epoch
	Expires     int64  `json:"expires" msgpack:"expires"`    // ms since the Unix epoch
	Seller      int64  `json:"seller" msgpack:"seller"`
	Category    int64  `json:"category" msgpack:"category"`
	Extra       string `json:"extra" msgpack:"extra"`
}

// Bid is an offer for an auction.
type Bid struct {
	Auction  int64  `json:"auction" msgpack:"auction"`
	Bidder   int64  `json:"bidder" msgpack:"bidder"`
	Price    int64  `json:"price" msgpack:"price"` // cents
	DateTime int64  `json:"dateTime" msgpack:"ts"` // ms since the Unix epoch
	Extra    string `json:"extra" msgpack:"extra"`
}

// Event is one event of the stream: exactly one of its fields is set.
type Event struct {
	Person  *Person  `msgpack:"p,omitempty"`
	Auction *Auction `msgpack:"a,omitempty"`
	Bid     *Bid     `msgpack:"b,omitempty"`
}

// Time returns the event's time in ms since the Unix epoch.
func (e Event) Time() int64 {
	switch {
	case e.Person != nil:
		return e.Person.DateTime
	case e.Auction != nil:
		return e.Auction.DateTime
	case e.Bid != nil:
		return e.Bid.DateTime
	}
	return 0
}
