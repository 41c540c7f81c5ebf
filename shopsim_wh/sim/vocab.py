"""Static vocabulary of the synthetic shop: categories, attributes, option values, brands, personas.

Everything here is plain data. Rules the generator relies on:

- attribute phrases and option values never overlap inside one category (a value means one thing);
- option values never equal a fixed page button (``Buy Now``, ``< Prev``, ...) nor contain ``;`` ``:`` ``,``
  (the item page renders selections as ``type: value; type: value``);
- category names are plural nouns; ``nouns`` are the kinds of product a title / instruction names.
"""

from __future__ import annotations

SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
SHOE_SIZES = ("us 6", "us 6.5", "us 7", "us 7.5", "us 8", "us 8.5", "us 9", "us 9.5", "us 10", "us 11", "us 12")
COLORS = (
    "black", "white", "navy", "red", "grey", "beige", "olive green", "burgundy",
    "sky blue", "pink", "brown", "teal", "mustard yellow", "lavender purple",
)
COUNTS = ("1 count", "2 count", "3 count", "6 count", "12 count", "24 count")
VOLUMES = ("4 fl oz", "8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz")
WEIGHTS = ("1 lb", "2 lb", "3 lb", "5 lb", "10 lb")

# name -> (nouns, attributes, {option type: value pool})
CATEGORIES: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "rain jackets": (
        ("rain jacket", "rain shell", "windbreaker"),
        ("waterproof", "breathable", "packable", "hooded", "lightweight", "windproof", "zip pockets",
         "machine washable", "reflective trim", "fleece lined", "seam sealed", "adjustable cuffs"),
        {"size": SIZES, "color": COLORS},
    ),
    "running shoes": (
        ("running shoes", "trail runners", "road running sneakers"),
        ("cushioned", "lightweight", "breathable mesh", "non slip", "arch support", "wide toe box",
         "memory foam insole", "shock absorbing", "vegan leather", "quick dry", "wide fit", "knit upper"),
        {"size": SHOE_SIZES, "color": COLORS},
    ),
    "t-shirts": (
        ("t-shirt", "tee", "crew neck shirt"),
        ("organic cotton", "slim fit", "relaxed fit", "moisture wicking", "tagless", "short sleeve",
         "long sleeve", "pre shrunk", "soft touch", "recycled polyester", "heavyweight", "garment dyed"),
        {"size": SIZES, "color": COLORS},
    ),
    "yoga pants": (
        ("yoga pants", "leggings", "workout tights"),
        ("high waist", "four way stretch", "squat proof", "side pockets", "tummy control", "buttery soft",
         "ankle length", "flare leg", "seamless", "opaque", "quick dry", "brushed fabric"),
        {"size": SIZES, "color": COLORS},
    ),
    "backpacks": (
        ("backpack", "daypack", "laptop backpack"),
        ("water resistant", "laptop sleeve", "padded straps", "usb charging port", "anti theft",
         "lightweight", "expandable", "carry on size", "chest strap", "bottle pockets", "ripstop nylon",
         "hidden pocket"),
        {"color": COLORS, "capacity": ("15 liter", "20 liter", "25 liter", "30 liter", "40 liter")},
    ),
    "coffee": (
        ("coffee beans", "ground coffee", "coffee blend"),
        ("whole bean", "organic", "fair trade", "single origin", "low acid", "decaf", "small batch",
         "arabica", "bold flavor", "smooth finish", "rainforest certified", "fresh roasted"),
        {"roast": ("light roast", "medium roast", "dark roast", "espresso roast"),
         "weight": WEIGHTS[:3]},
    ),
    "protein powder": (
        ("protein powder", "protein shake mix", "whey protein"),
        ("whey isolate", "plant based", "gluten free", "keto friendly", "no added sugar", "grass fed",
         "non gmo", "low carb", "easy mixing", "added bcaa", "soy free", "third party tested"),
        {"flavor": ("vanilla", "chocolate", "strawberry", "unflavored", "cookies and cream", "salted caramel"),
         "weight": WEIGHTS},
    ),
    "shampoo": (
        ("shampoo", "clarifying shampoo", "moisturizing shampoo"),
        ("sulfate free", "paraben free", "color safe", "for dry hair", "volumizing", "anti dandruff",
         "cruelty free", "argan oil", "tea tree", "salon quality", "for curly hair", "silicone free"),
        {"scent": ("coconut", "eucalyptus mint", "citrus", "unscented", "rose", "green apple"),
         "volume": VOLUMES},
    ),
    "face moisturizers": (
        ("face moisturizer", "face cream", "day lotion"),
        ("spf 30", "hyaluronic acid", "oil free", "non comedogenic", "for sensitive skin", "vitamin c",
         "night cream", "ceramides", "fast absorbing", "dermatologist tested", "anti aging", "niacinamide"),
        {"volume": VOLUMES[:3]},
    ),
    "candles": (
        ("scented candle", "jar candle", "candle set"),
        ("soy wax", "long lasting", "lead free wick", "hand poured", "gift ready", "clean burning",
         "wooden wick", "natural essential oils", "reusable jar", "strong scent throw", "vegan", "three wick"),
        {"scent": ("lavender", "vanilla bean", "sandalwood", "fresh linen", "pumpkin spice", "sea salt"),
         "count": COUNTS[:4]},
    ),
    "headphones": (
        ("headphones", "wireless earbuds", "over ear headset"),
        ("noise cancelling", "wireless", "over ear", "bluetooth", "long battery life", "foldable",
         "built in microphone", "deep bass", "sweat resistant", "fast charging", "low latency",
         "memory foam ear cushions"),
        {"color": ("black", "white", "navy", "rose gold", "silver", "midnight green")},
    ),
    "phone cases": (
        ("phone case", "protective cover", "wallet case"),
        ("shockproof", "slim", "magsafe compatible", "clear", "card holder", "kickstand", "raised edges",
         "anti yellowing", "wireless charging compatible", "military grade", "matte finish", "lanyard hole"),
        {"model": ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "galaxy s24", "pixel 8"),
         "color": ("black", "crystal", "navy", "red", "pink", "lavender purple")},
    ),
    "charging cables": (
        ("charging cable", "usb c cable", "charger cord"),
        ("fast charging", "braided nylon", "usb c to usb c", "data sync", "tangle free",
         "reinforced connectors", "right angle", "usb a to lightning", "gold plated", "heat resistant",
         "mfi certified", "high speed"),
        {"length": ("3 ft", "6 ft", "10 ft"), "count": COUNTS[:4]},
    ),
    "desk lamps": (
        ("desk lamp", "reading lamp", "led task light"),
        ("led", "dimmable", "usb charging port", "touch control", "adjustable arm", "eye caring",
         "clamp mount", "color temperature modes", "timer", "energy efficient", "flicker free", "wireless charger"),
        {"color": ("black", "white", "silver", "walnut brown")},
    ),
    "office chairs": (
        ("office chair", "desk chair", "task chair"),
        ("ergonomic", "lumbar support", "adjustable height", "mesh back", "swivel", "padded armrests",
         "headrest", "reclining", "rolling casters", "high back", "flip up arms", "heavy duty"),
        {"color": ("black", "grey", "white", "navy", "brown")},
    ),
    "bookshelves": (
        ("bookshelf", "bookcase", "shelving unit"),
        ("solid wood", "easy assembly", "industrial style", "wall anchor", "open back", "adjustable shelves",
         "metal frame", "space saving", "farmhouse", "ladder style", "sturdy", "corner"),
        {"finish": ("rustic brown", "white oak", "espresso", "black walnut", "natural pine"),
         "tiers": ("3 tier", "4 tier", "5 tier")},
    ),
    "bed sheets": (
        ("sheet set", "bed sheets", "fitted sheet set"),
        ("deep pocket", "egyptian cotton", "breathable", "wrinkle free", "cooling", "microfiber",
         "sateen weave", "hypoallergenic", "fade resistant", "bamboo viscose", "percale", "oeko tex certified"),
        {"bed size": ("twin", "full", "queen", "king", "california king"), "color": COLORS},
    ),
    "bath towels": (
        ("bath towel set", "bath towels", "towel set"),
        ("quick dry", "ultra absorbent", "turkish cotton", "plush", "lint free", "oversized",
         "hotel quality", "machine washable", "ring spun", "soft", "fade resistant", "low twist"),
        {"color": COLORS, "count": ("2 count", "4 count", "6 count", "8 count")},
    ),
    "cookware sets": (
        ("cookware set", "pots and pans set", "frying pan set"),
        ("nonstick", "dishwasher safe", "oven safe", "induction compatible", "stainless steel",
         "ceramic coated", "pfoa free", "glass lids", "stay cool handles", "cast iron", "even heating",
         "stackable"),
        {"color": ("black", "red", "grey", "cream white", "sage green"),
         "pieces": ("3 piece", "5 piece", "8 piece", "10 piece", "12 piece")},
    ),
    "water bottles": (
        ("water bottle", "insulated tumbler", "sports bottle"),
        ("insulated", "leak proof", "bpa free", "wide mouth", "straw lid", "dishwasher safe", "keeps cold",
         "stainless steel", "carry handle", "time marker", "sweat free", "collapsible"),
        {"color": COLORS, "capacity": ("12 oz", "20 oz", "24 oz", "32 oz", "40 oz")},
    ),
    "dog food": (
        ("dry dog food", "dog kibble", "puppy food"),
        ("grain free", "high protein", "real meat first", "for small breeds", "for large breeds",
         "limited ingredient", "sensitive stomach", "no artificial preservatives", "omega 3", "natural",
         "senior formula", "made in usa"),
        {"flavor": ("chicken", "salmon", "beef", "lamb", "turkey"), "weight": ("4 lb", "15 lb", "30 lb")},
    ),
    "vitamins": (
        ("multivitamin", "vitamin supplement", "daily gummies"),
        ("vegan", "gluten free", "non gmo", "sugar free", "third party tested", "whole food", "chewable",
         "immune support", "for women", "for men", "easy to swallow", "once daily"),
        {"count": ("30 count", "60 count", "90 count", "120 count")},
    ),
    "snack bars": (
        ("protein bars", "granola bars", "snack bars"),
        ("high protein", "low sugar", "gluten free", "keto friendly", "plant based", "no artificial sweeteners",
         "high fiber", "kosher", "individually wrapped", "nut free", "whole grain", "non gmo"),
        {"flavor": ("peanut butter", "chocolate chip", "almond", "blueberry", "coconut", "mixed berry"),
         "count": ("6 count", "12 count", "24 count")},
    ),
    "yoga mats": (
        ("yoga mat", "exercise mat", "pilates mat"),
        ("non slip", "extra thick", "eco friendly", "alignment lines", "carrying strap", "sweat resistant",
         "tpe material", "natural rubber", "lightweight", "easy to clean", "reversible", "odor free"),
        {"thickness": ("4mm", "6mm", "8mm", "10mm"), "color": COLORS},
    ),
}

TITLE_SUFFIXES = ("", "", "for Women", "for Men", "for Home", "for Everyday Use", "2 Pack", "Premium Edition")

BRANDS = (
    "Nordvik", "Alpenrose", "Kestrel", "Marlowe", "Bramble & Co", "Sunfield", "Oakhaven", "Lumora", "Tidewell",
    "Corvid", "Halcyon", "Pinecrest", "Velora", "Driftwood", "Ironbark", "Solace", "Ember Lane", "Quillon",
    "Briarwood", "Cobalt Peak", "Wren & Finch", "Greystone", "Marigold", "Northwind", "Aurelia", "Juniper",
    "Stonefly", "Bluecrest", "Calloway", "Fernhill", "Redtail", "Saltmarsh", "Thistle", "Larkspur",
    "Harbor Mill", "Copperline", "Windrose", "Silverleaf", "Mossgrove", "Birchmont",
)

FIRST_NAMES = (
    "Maya", "Liam", "Sofia", "Noah", "Aisha", "Kenji", "Elena", "Mateo", "Priya", "Jonas", "Chloe", "Omar",
    "Hana", "Lucas", "Zara", "Diego", "Ingrid", "Tariq", "Mei", "Samuel", "Nadia", "Arjun", "Freya", "Kofi",
    "Lena", "Rafael", "Yuki", "Amara", "Felix", "Leila", "Ravi", "Greta", "Malik", "Ana", "Tomas", "Ines",
)
OCCUPATIONS = (
    "nurse", "teacher", "software engineer", "student", "retired librarian", "chef", "graphic designer",
    "electrician", "marathon runner", "new parent", "accountant", "farmer", "musician", "pharmacist",
    "photographer", "small business owner",
)
PREFERENCES = (
    "prefers eco-friendly materials", "shops on a tight budget", "values durability over style",
    "likes muted colors", "buys gifts for family often", "wants products that are easy to clean",
    "cares about fast shipping", "reads every review before buying", "loves bold colors",
    "avoids synthetic fragrances", "prefers well known brands", "buys in bulk to save money",
    "has sensitive skin", "travels a lot for work", "likes minimalist design", "spends weekends outdoors",
)
