"""Generate the built-in demo dataset (``train.tsv`` and ``dev.tsv`` next to this file).

Every sentence below was written by hand for this project. The script only combines them into scored pairs,
deterministically (fixed seed, no dependence on the environment), so running it again reproduces the
committed TSV files byte for byte::

    python tools/make_demo_data.py          # rewrite the files
    python tools/make_demo_data.py --check  # exit 1 if the files differ from the output

Design. Each topic has 8 "events"; each event is written five ways:

* ``base``      - the event;
* ``para``      - a paraphrase of it (different words, same meaning);
* ``detail``    - the same event with one unimportant detail changed or added;
* ``partial``   - the event with important information missing;
* ``contra``    - nearly the same words as ``base``, opposite meaning (negation, antonym, swapped roles).

Pairs inside an event get fixed scores on the STS 0..5 scale (see ``SCORES``); events of the same topic
are "same topic, different event" (2.0) and events of different topics are unrelated (0.0). Fixed scores per
relation keep the labels consistent, which is what makes the graded structure learnable from ~500 pairs.
The ``contra`` pairs share most words with the event yet score low: an off-the-shelf sentence encoder rates
them as near paraphrases, so they are where fine-tuning on this set shows a measurable gain.

Two events per topic are held out for the dev split, so dev sentences never occur in train.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from pathlib import Path

Event = tuple[str, str, str, str, str]  # (base, para, detail, partial, contra)
KINDS = ("base", "para", "detail", "partial", "contra")

EVENTS: dict[str, list[Event]] = {
    "cooking": [
        (
            "The chef is slicing onions for the soup.",
            "A cook is chopping onions to put in the soup.",
            "The chef is slicing red onions for the soup.",
            "The chef is slicing onions.",
            "The chef is not slicing any onions for the soup.",
        ),
        (
            "She baked a loaf of bread in the oven this morning.",
            "This morning she made a loaf of bread in the oven.",
            "She baked two loaves of bread in the oven this morning.",
            "She baked some bread.",
            "She forgot to bake the loaf of bread this morning.",
        ),
        (
            "The pasta needs to boil for ten minutes.",
            "Boil the pasta for about ten minutes.",
            "The pasta needs to boil for twelve minutes.",
            "The pasta needs to boil.",
            "The pasta should never be boiled for ten minutes.",
        ),
        (
            "He added too much salt to the sauce.",
            "He put far too much salt in the sauce.",
            "He added too much salt to the tomato sauce.",
            "He added salt.",
            "He added too little salt to the sauce.",
        ),
        (
            "The soup was too hot to eat right away.",
            "The soup was so hot that nobody could eat it immediately.",
            "The soup was too hot to eat right away, so they waited.",
            "The soup was hot.",
            "The soup was cool enough to eat right away.",
        ),
        (
            "My grandmother makes the best apple pie in town.",
            "Nobody in town bakes a better apple pie than my grandmother.",
            "My grandmother makes the best apple pie in the whole county.",
            "My grandmother makes apple pie.",
            "My grandmother makes the worst apple pie in town.",
        ),
        (
            "They grilled fresh fish on the barbecue.",
            "Fresh fish was cooked on the barbecue grill.",
            "They grilled fresh fish and corn on the barbecue.",
            "They grilled fish.",
            "They did not grill any fish on the barbecue.",
        ),
        (
            "The recipe calls for two eggs and a cup of flour.",
            "You need two eggs and one cup of flour for this recipe.",
            "The recipe calls for three eggs and a cup of flour.",
            "The recipe calls for eggs.",
            "The recipe calls for no eggs and no flour.",
        ),
    ],
    "sport": [
        (
            "The home team won the football match.",
            "The local side was victorious in the soccer game.",
            "The home team won the football match by two goals.",
            "The home team won.",
            "The home team lost the football match.",
        ),
        (
            "A tennis player served the ball over the net.",
            "The tennis player hit a serve across the net.",
            "A young tennis player served the ball over the net.",
            "A tennis player served the ball.",
            "A tennis player hit the ball straight into the net.",
        ),
        (
            "The runner finished the marathon in under three hours.",
            "She completed the marathon in less than three hours.",
            "The runner finished the city marathon in under three hours.",
            "The runner finished the marathon.",
            "The runner failed to finish the marathon.",
        ),
        (
            "The goalkeeper stopped the penalty kick.",
            "The keeper saved the penalty.",
            "The goalkeeper stopped the penalty kick with his left hand.",
            "There was a penalty kick.",
            "The goalkeeper could not stop the penalty kick.",
        ),
        (
            "The basketball player scored thirty points last night.",
            "Last night the basketball player put up thirty points.",
            "The basketball player scored thirty-two points last night.",
            "The basketball player scored points.",
            "The basketball player did not score a single point last night.",
        ),
        (
            "The cyclists climbed the steep mountain pass.",
            "The riders rode up the steep mountain road.",
            "The cyclists slowly climbed the steep mountain pass in the rain.",
            "The cyclists climbed.",
            "The cyclists rode down the steep mountain pass.",
        ),
        (
            "The swimmer broke the world record in the final.",
            "In the final, the swimmer set a new world record.",
            "The young swimmer broke the world record in the final.",
            "The swimmer competed in the final.",
            "The swimmer came last in the final.",
        ),
        (
            "The match was postponed because of heavy rain.",
            "Heavy rain forced the game to be postponed.",
            "The match was postponed until Sunday because of heavy rain.",
            "The match was postponed.",
            "The match went ahead despite the heavy rain.",
        ),
    ],
    "music": [
        (
            "A man is playing the guitar on stage.",
            "On stage, a man plays his guitar.",
            "A man is playing an electric guitar on stage.",
            "A man is on stage.",
            "A man is not playing the guitar on stage.",
        ),
        (
            "The orchestra performed a symphony by Beethoven.",
            "A Beethoven symphony was played by the orchestra.",
            "The orchestra performed a symphony by Beethoven last night.",
            "The orchestra performed.",
            "The orchestra refused to perform the symphony by Beethoven.",
        ),
        (
            "She is learning to play the piano.",
            "She is taking piano lessons.",
            "She is learning to play the piano at the age of forty.",
            "She is learning an instrument.",
            "She has stopped learning to play the piano.",
        ),
        (
            "The band released a new album on Friday.",
            "On Friday the band put out a new record.",
            "The rock band released a new album on Friday.",
            "The band released an album.",
            "The band cancelled the release of its new album.",
        ),
        (
            "The concert tickets sold out in ten minutes.",
            "All the tickets for the concert were gone within ten minutes.",
            "The concert tickets sold out in fifteen minutes.",
            "Tickets for the concert went on sale.",
            "The concert tickets did not sell at all.",
        ),
        (
            "A girl is singing a song into a microphone.",
            "A girl sings a song into the mic.",
            "A little girl is singing a sad song into a microphone.",
            "A girl is singing.",
            "A girl is refusing to sing into the microphone.",
        ),
        (
            "The drummer kept a steady beat throughout the song.",
            "The drummer played a steady rhythm for the whole song.",
            "The drummer kept a steady beat throughout the long song.",
            "The drummer played.",
            "The drummer kept losing the beat throughout the song.",
        ),
        (
            "The choir sang quietly in the old church.",
            "In the old church, the choir sang softly.",
            "The children's choir sang quietly in the old church.",
            "The choir sang.",
            "The choir sang loudly in the old church.",
        ),
    ],
    "weather": [
        (
            "It is raining heavily in the city today.",
            "There is heavy rain in the city today.",
            "It is raining heavily in the city this afternoon.",
            "It is raining.",
            "It is dry and sunny in the city today.",
        ),
        (
            "Snow is expected in the mountains tonight.",
            "Forecasters predict snowfall in the mountains tonight.",
            "Up to ten centimetres of snow is expected in the mountains tonight.",
            "Snow is expected.",
            "No snow is expected in the mountains tonight.",
        ),
        (
            "A strong wind blew down several trees.",
            "Several trees were knocked over by strong winds.",
            "A strong wind blew down several old trees in the park.",
            "The wind was strong.",
            "A strong wind blew, but no trees fell.",
        ),
        (
            "The temperature rose above thirty degrees yesterday.",
            "Yesterday it got hotter than thirty degrees.",
            "The temperature rose above thirty-two degrees yesterday.",
            "The temperature rose yesterday.",
            "The temperature fell below zero degrees yesterday.",
        ),
        (
            "Thick fog covered the valley this morning.",
            "The valley was blanketed in dense fog this morning.",
            "Thick fog covered the valley and the river this morning.",
            "There was fog this morning.",
            "The valley was completely clear of fog this morning.",
        ),
        (
            "A thunderstorm knocked out the power last night.",
            "Last night's thunderstorm caused a power cut.",
            "A violent thunderstorm knocked out the power for hours last night.",
            "There was a thunderstorm last night.",
            "Despite the thunderstorm, the power stayed on last night.",
        ),
        (
            "The weather will be sunny all weekend.",
            "Expect sunshine throughout the weekend.",
            "The weather will be sunny and warm all weekend.",
            "Saturday will be sunny.",
            "The weather will be rainy all weekend.",
        ),
        (
            "The river flooded after a week of rain.",
            "A week of rain made the river overflow its banks.",
            "The river flooded the nearby fields after a week of rain.",
            "It rained for a week.",
            "The river stayed low even after a week of rain.",
        ),
    ],
    "computers": [
        (
            "My laptop crashed while I was saving the file.",
            "The laptop froze as I was saving my file.",
            "My old laptop crashed while I was saving the report.",
            "My laptop crashed.",
            "My laptop worked fine while I was saving the file.",
        ),
        (
            "He installed the latest software update.",
            "He updated the software to the newest version.",
            "He installed the latest software update on his phone.",
            "He installed some software.",
            "He uninstalled the latest software update.",
        ),
        (
            "The website is loading very slowly today.",
            "Today the site is taking ages to load.",
            "The shopping website is loading very slowly today.",
            "The website is loading.",
            "The website is loading very quickly today.",
        ),
        (
            "She wrote a program to sort the customer list.",
            "She coded a script that sorts the list of customers.",
            "She wrote a Python program to sort the customer list.",
            "She wrote a program.",
            "She could not write a program to sort the customer list.",
        ),
        (
            "The password must contain at least eight characters.",
            "Passwords need to be eight characters long or more.",
            "The password must contain at least eight characters and one number.",
            "A password is required.",
            "The password must contain at most eight characters.",
        ),
        (
            "The printer has run out of paper again.",
            "There is no paper left in the printer again.",
            "The office printer has run out of paper again.",
            "There is a problem with the printer.",
            "The printer was just filled with plenty of paper.",
        ),
        (
            "I backed up all my photos to an external drive.",
            "All my pictures are now copied onto an external hard disk.",
            "I backed up all my holiday photos to an external drive.",
            "I backed up some files.",
            "I accidentally deleted all my photos from the external drive.",
        ),
        (
            "The computer virus spread through email attachments.",
            "The malware was passed around in email attachments.",
            "The computer virus spread quickly through email attachments.",
            "There was a computer virus.",
            "The computer virus did not spread through email attachments.",
        ),
    ],
    "travel": [
        (
            "Our flight to Lisbon was delayed by two hours.",
            "The plane to Lisbon left two hours late.",
            "Our early flight to Lisbon was delayed by two hours.",
            "Our flight was delayed.",
            "Our flight to Lisbon left exactly on time.",
        ),
        (
            "They booked a hotel room near the beach.",
            "They reserved a hotel room close to the beach.",
            "They booked a cheap hotel room near the beach.",
            "They booked a hotel.",
            "They booked a hotel room far from the beach.",
        ),
        (
            "We visited the museum on our last day in Rome.",
            "On our final day in Rome we went to the museum.",
            "We visited the history museum on our last day in Rome.",
            "We were in Rome.",
            "We skipped the museum on our last day in Rome.",
        ),
        (
            "He lost his passport at the airport.",
            "His passport went missing at the airport.",
            "He lost his passport at the airport in Madrid.",
            "He was at the airport.",
            "He found his lost passport at the airport.",
        ),
        (
            "The tourists took a boat trip along the coast.",
            "The visitors went on a boat tour along the coastline.",
            "The tourists took a short boat trip along the rocky coast.",
            "The tourists took a trip.",
            "The tourists cancelled their boat trip along the coast.",
        ),
        (
            "She packed her suitcase the night before the trip.",
            "The evening before leaving, she packed her bag.",
            "She packed her big suitcase the night before the trip.",
            "She packed a suitcase.",
            "She forgot to pack her suitcase before the trip.",
        ),
        (
            "The hostel was clean and cheap.",
            "The hostel was tidy and inexpensive.",
            "The hostel was clean, cheap and close to the station.",
            "The hostel was cheap.",
            "The hostel was dirty and expensive.",
        ),
        (
            "We rented a car to drive around the island.",
            "We hired a car so we could tour the island.",
            "We rented a small car to drive around the island for a week.",
            "We rented a car.",
            "We did not rent a car and walked around the island.",
        ),
    ],
    "animals": [
        (
            "The dog is chasing the cat around the garden.",
            "A dog runs after the cat in the garden.",
            "The big dog is chasing the cat around the garden.",
            "The dog is running.",
            "The cat is chasing the dog around the garden.",
        ),
        (
            "A bird is building a nest in the tree.",
            "A bird is making its nest in a tree.",
            "A small bird is building a nest high in the tree.",
            "There is a bird in the tree.",
            "A bird is tearing apart a nest in the tree.",
        ),
        (
            "The horse jumped over the fence.",
            "The horse leapt over the fence.",
            "The brown horse jumped over the wooden fence.",
            "The horse jumped.",
            "The horse refused to jump over the fence.",
        ),
        (
            "A cat is sleeping on the sofa.",
            "A cat is napping on the couch.",
            "A grey cat is sleeping on the sofa.",
            "There is a cat on the furniture.",
            "A cat is wide awake on the sofa.",
        ),
        (
            "The farmer is feeding the cows in the barn.",
            "In the barn, the farmer gives the cows their food.",
            "The farmer is feeding the cows hay in the barn.",
            "The farmer is in the barn.",
            "The farmer has stopped feeding the cows in the barn.",
        ),
        (
            "A monkey is eating a banana.",
            "A monkey eats a banana.",
            "A young monkey is eating a ripe banana.",
            "A monkey is eating.",
            "A monkey is throwing away a banana.",
        ),
        (
            "The whale swam close to the fishing boat.",
            "A whale came near the fishing boat.",
            "The huge whale swam close to the small fishing boat.",
            "There was a whale.",
            "The whale swam far away from the fishing boat.",
        ),
        (
            "The puppy is afraid of the vacuum cleaner.",
            "The young dog is scared of the vacuum.",
            "The little puppy is very afraid of the vacuum cleaner.",
            "The puppy is afraid.",
            "The puppy is not afraid of the vacuum cleaner.",
        ),
    ],
    "finance": [
        (
            "The bank raised interest rates by half a percent.",
            "Interest rates were increased by 0.5 percent by the bank.",
            "The central bank raised interest rates by half a percent on Thursday.",
            "The bank changed interest rates.",
            "The bank cut interest rates by half a percent.",
        ),
        (
            "Share prices fell sharply this morning.",
            "Stock prices dropped steeply this morning.",
            "Share prices of tech companies fell sharply this morning.",
            "Share prices moved this morning.",
            "Share prices rose sharply this morning.",
        ),
        (
            "She saves part of her salary every month.",
            "Every month she puts some of her pay into savings.",
            "She saves a tenth of her salary every month.",
            "She earns a salary.",
            "She spends all of her salary every month.",
        ),
        (
            "The company reported record profits this year.",
            "This year the firm announced its highest profits ever.",
            "The company reported record profits for the third year in a row.",
            "The company reported its results.",
            "The company reported heavy losses this year.",
        ),
        (
            "He paid off his mortgage early.",
            "He finished repaying his home loan ahead of schedule.",
            "He paid off his mortgage five years early.",
            "He had a mortgage.",
            "He could not pay his mortgage on time.",
        ),
        (
            "The price of petrol went up again.",
            "Petrol has become more expensive again.",
            "The price of petrol went up again this week.",
            "The price of petrol changed.",
            "The price of petrol went down again.",
        ),
        (
            "The startup raised ten million dollars from investors.",
            "Investors put ten million dollars into the startup.",
            "The software startup raised ten million dollars from investors.",
            "The startup raised money.",
            "The startup failed to raise any money from investors.",
        ),
        (
            "Inflation is making groceries more expensive.",
            "Because of inflation, food shopping costs more.",
            "Inflation is making groceries and rent more expensive.",
            "There is inflation.",
            "Groceries are getting cheaper despite inflation.",
        ),
    ],
    "health": [
        (
            "Regular exercise lowers the risk of heart disease.",
            "Working out regularly reduces your chance of heart disease.",
            "Regular exercise lowers the risk of heart disease and diabetes.",
            "Exercise is good for the heart.",
            "Regular exercise raises the risk of heart disease.",
        ),
        (
            "The doctor prescribed antibiotics for the infection.",
            "The physician gave her antibiotics to treat the infection.",
            "The doctor prescribed antibiotics for the ear infection.",
            "The doctor prescribed some medicine.",
            "The doctor refused to prescribe antibiotics for the infection.",
        ),
        (
            "He has had a bad cough for a week.",
            "For the last week he has been coughing badly.",
            "He has had a bad dry cough for a week.",
            "He has a cough.",
            "He has not coughed at all this week.",
        ),
        (
            "Drinking enough water helps prevent headaches.",
            "Staying hydrated can stop headaches from starting.",
            "Drinking enough water during the day helps prevent headaches.",
            "Drinking water is healthy.",
            "Drinking too much water causes headaches.",
        ),
        (
            "The nurse took the patient's blood pressure.",
            "The patient had their blood pressure measured by the nurse.",
            "The nurse took the elderly patient's blood pressure.",
            "The nurse saw the patient.",
            "The patient took the nurse's blood pressure.",
        ),
        (
            "She broke her arm falling off a bike.",
            "She fractured her arm when she fell from her bicycle.",
            "She broke her left arm falling off a bike.",
            "She fell off a bike.",
            "She fell off a bike but did not break her arm.",
        ),
        (
            "Getting eight hours of sleep improves concentration.",
            "Sleeping eight hours a night helps you focus.",
            "Getting eight hours of sleep every night improves concentration at work.",
            "Sleep improves concentration.",
            "Getting eight hours of sleep makes concentration worse.",
        ),
        (
            "The vaccine protects children against measles.",
            "Children are protected from measles by the vaccine.",
            "The free vaccine protects young children against measles.",
            "There is a vaccine for children.",
            "The vaccine does not protect children against measles.",
        ),
    ],
    "transport": [
        (
            "The train to the airport leaves every fifteen minutes.",
            "Trains to the airport depart every quarter of an hour.",
            "The express train to the airport leaves every fifteen minutes.",
            "There is a train to the airport.",
            "The train to the airport leaves only once a day.",
        ),
        (
            "The bus was packed with commuters this morning.",
            "This morning the bus was crowded with people going to work.",
            "The number 12 bus was packed with commuters this morning.",
            "The bus was full.",
            "The bus was almost empty this morning.",
        ),
        (
            "A truck blocked the road after an accident.",
            "The road was blocked by a lorry following a crash.",
            "A delivery truck blocked the main road after an accident.",
            "There was an accident.",
            "The road stayed open after the truck accident.",
        ),
        (
            "He rides his bicycle to work every day.",
            "Every day he cycles to his job.",
            "He rides his old bicycle to work every day, even in winter.",
            "He has a bicycle.",
            "He never rides his bicycle to work.",
        ),
        (
            "The ferry crossed the bay in calm water.",
            "The ferry sailed across the bay on a calm sea.",
            "The morning ferry crossed the bay in calm water.",
            "The ferry crossed the bay.",
            "The ferry could not cross the bay in the storm.",
        ),
        (
            "The city is building a new subway line.",
            "A new metro line is being built in the city.",
            "The city is building a new subway line to the stadium.",
            "The city has a subway.",
            "The city has stopped building the new subway line.",
        ),
        (
            "Traffic on the motorway was moving slowly.",
            "Cars on the highway were crawling along.",
            "Traffic on the motorway was moving slowly because of roadworks.",
            "There was traffic on the motorway.",
            "Traffic on the motorway was moving fast.",
        ),
        (
            "The taxi driver took us straight to the hotel.",
            "The cab driver drove us directly to our hotel.",
            "The friendly taxi driver took us straight to the hotel.",
            "We took a taxi.",
            "The taxi driver took us to the wrong hotel.",
        ),
    ],
}

# Score of a pair by the relation between its two sentences (STS 0..5 scale). One value per relation:
# consistent labels are what a small model can learn in one epoch.
SCORES: dict[tuple[str, str], float] = {
    ("base", "para"): 5.0,  # same meaning, different words
    ("base", "detail"): 4.0,  # same event, an unimportant detail differs
    ("para", "detail"): 3.6,  # ... and worded differently
    ("base", "partial"): 3.0,  # important information missing
    ("para", "partial"): 2.8,
    ("base", "contra"): 1.0,  # nearly the same words, opposite meaning
    ("para", "contra"): 1.0,
}
SAME_TOPIC_SCORE = 2.0  # same topic, different event
UNRELATED_SCORE = 0.0  # different topics

SEED = 20250101
DEV_EVENTS = (3, 7)  # event indices, in every topic, held out for the dev split
# Within-event relations used for every train event, and for dev events (rotating, to keep dev ~130 rows).
TRAIN_RELATIONS = tuple(SCORES)
DEV_RELATION_SETS = (
    (("base", "para"), ("base", "detail"), ("para", "partial"), ("base", "contra"), ("para", "contra")),
    (("base", "para"), ("para", "detail"), ("base", "partial"), ("base", "contra"), ("para", "contra")),
)
TRAIN_SAME_TOPIC_PER_TOPIC = 8
DEV_SAME_TOPIC_PER_TOPIC = 2
TRAIN_UNRELATED = 60
DEV_UNRELATED = 20
# Variants used for cross-event pairs; contra/partial would mix a second relation into the pair.
CROSS_KINDS = ("base", "para", "detail")

Row = tuple[str, str, float]


def _sentence(event: Event, kind: str) -> str:
    return event[KINDS.index(kind)]


def _split_events(split: str) -> dict[str, list[Event]]:
    keep = (lambda i: i in DEV_EVENTS) if split == "dev" else (lambda i: i not in DEV_EVENTS)
    return {topic: [e for i, e in enumerate(events) if keep(i)] for topic, events in EVENTS.items()}


def _build_split(split: str, rng: random.Random) -> list[Row]:
    events = _split_events(split)
    rows: list[Row] = []
    # 1. pairs inside one event
    for topic in EVENTS:
        for n, event in enumerate(events[topic]):
            relations = TRAIN_RELATIONS if split == "train" else DEV_RELATION_SETS[n % len(DEV_RELATION_SETS)]
            for a, b in relations:
                rows.append((_sentence(event, a), _sentence(event, b), SCORES[(a, b)]))
    # 2. same topic, different events
    per_topic = TRAIN_SAME_TOPIC_PER_TOPIC if split == "train" else DEV_SAME_TOPIC_PER_TOPIC
    for topic in EVENTS:
        combos = list(itertools.combinations(range(len(events[topic])), 2))
        # With only two dev events there is one combination; it is reused with different variants.
        chosen = (
            [combos[rng.randrange(len(combos))] for _ in range(per_topic)]
            if len(combos) < per_topic
            else (rng.sample(combos, per_topic))
        )
        for i, j in chosen:
            rows.append(
                (
                    _sentence(events[topic][i], rng.choice(CROSS_KINDS)),
                    _sentence(events[topic][j], rng.choice(CROSS_KINDS)),
                    SAME_TOPIC_SCORE,
                )
            )
    # 3. unrelated: different topics
    topics = list(EVENTS)
    for _ in range(TRAIN_UNRELATED if split == "train" else DEV_UNRELATED):
        t1, t2 = rng.sample(topics, 2)
        rows.append(
            (
                _sentence(rng.choice(events[t1]), rng.choice(CROSS_KINDS)),
                _sentence(rng.choice(events[t2]), rng.choice(CROSS_KINDS)),
                UNRELATED_SCORE,
            )
        )
    # Drop repeated pairs (random draws can repeat), keeping the first; order within a pair is irrelevant.
    seen: set[frozenset[str]] = set()
    unique: list[Row] = []
    for s1, s2, score in rows:
        key = frozenset((s1, s2))
        if key not in seen:
            seen.add(key)
            unique.append((s1, s2, score))
    # Random sentence order inside each pair (a siamese model must not rely on it) and random row order.
    unique = [(s2, s1, score) if rng.random() < 0.5 else (s1, s2, score) for s1, s2, score in unique]
    rng.shuffle(unique)
    return unique


def build_splits() -> dict[str, list[Row]]:
    """Build the train and dev rows (deterministic)."""
    all_sentences = [s for events in EVENTS.values() for event in events for s in event]
    if len(set(all_sentences)) != len(all_sentences):
        raise AssertionError("a sentence is written twice; every sentence must be unique")
    if any("\t" in s or "\n" in s or s != s.strip() for s in all_sentences):
        raise AssertionError("sentences must not contain tabs/newlines or surrounding spaces")
    rng = random.Random(SEED)
    return {split: _build_split(split, rng) for split in ("train", "dev")}


def render(rows: list[Row]) -> str:
    """TSV text with a header; no field contains a tab, newline or quote-sensitive layout issue."""
    lines = ["sentence1\tsentence2\tscore"]
    lines += [f"{s1}\t{s2}\t{score:.1f}" for s1, s2, score in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``train.tsv`` and ``dev.tsv`` in ``--out`` (default: here)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "hf_siamese" / "data" / "demo_data"
    )
    parser.add_argument("--check", action="store_true", help="only compare with the existing files")
    args = parser.parse_args(argv)
    status = 0
    for split, rows in build_splits().items():
        target = args.out / f"{split}.tsv"
        text = render(rows)
        if args.check:
            same = target.is_file() and target.read_text(encoding="utf-8") == text
            print(f"{target}: {'up to date' if same else 'DIFFERS'}")
            status |= 0 if same else 1
        else:
            # newline="\n": identical bytes on every platform.
            target.write_text(text, encoding="utf-8", newline="\n")
            print(f"wrote {target} ({len(rows)} pairs)")
    return status


if __name__ == "__main__":
    sys.exit(main())
