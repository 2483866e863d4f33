"""The task family the simulated stream draws from: arithmetic word problems of 20 kinds.

Plain English on purpose: a real encoder (the `wordllama` option) should see tasks and
cheatsheet rules as an LLM curator would write them. Each kind has a question template, the
method a correct rule teaches, and the lead-ins a curator uses to phrase a rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    question: str  # str.format fields: person, a, b
    method: str


KINDS: tuple[Kind, ...] = (
    Kind("discount", "{person} buys a coat priced {a} dollars at {b} percent off. What is "
         "the sale price?", "multiply the price by one minus the discount rate"),
    Kind("interest", "{person} deposits {a} dollars at {b} percent simple interest for three "
         "years. How much interest is earned?", "multiply principal, rate and time"),
    Kind("speed", "A train travels {a} kilometres in {b} hours. What is its average speed?",
         "divide the distance by the time taken"),
    Kind("work rate", "{person} paints a fence in {a} hours and a friend in {b} hours. How long "
         "together?", "add the hourly rates and invert the sum"),
    Kind("ratio", "{person} shares {a} marbles in the ratio 2 to {b}. How many in the larger "
         "share?", "divide the total by the sum of the parts"),
    Kind("unit conversion", "How many centimetres are in {a} metres and {b} millimetres?",
         "convert every quantity to the smallest unit before adding"),
    Kind("area", "A rectangular garden is {a} metres long and {b} metres wide. What is its "
         "area?", "multiply length by width and keep square units"),
    Kind("perimeter", "A field is {a} metres by {b} metres. How much fencing goes around it?",
         "add twice the length and twice the width"),
    Kind("average", "{person} scored {a} and {b} and 70 on three tests. What is the mean "
         "score?", "sum the values and divide by how many there are"),
    Kind("age", "{person} is {a} years old and {b} years younger than a sister. How old is "
         "the sister in five years?", "write each age as an expression before adding years"),
    Kind("mixture", "{a} litres of juice at {b} percent sugar are mixed with water. How much "
         "sugar is there?", "track the amount of the pure ingredient, not the volume"),
    Kind("probability", "A bag has {a} red and {b} blue balls. What is the chance of drawing "
         "red?", "divide favourable outcomes by all outcomes"),
    Kind("combinations", "How many teams of two can be chosen from {a} players, then {b} "
         "more?", "use n choose k and avoid counting orders twice"),
    Kind("fractions", "{person} eats {a} eighths of a pie and then {b} eighths more. How much "
         "is left?", "put the fractions over a common denominator first"),
    Kind("time", "A film starts at {a} past two and lasts {b} minutes. When does it end?",
         "convert hours to minutes and carry past sixty"),
    Kind("profit", "{person} buys goods for {a} dollars and sells them for {b} dollars more. "
         "What is the profit percent?", "divide profit by cost, not by selling price"),
    Kind("tax", "A meal costs {a} dollars before {b} percent tax. What is the total bill?",
         "multiply the price by one plus the tax rate"),
    Kind("population growth", "A town of {a} people grows {b} percent a year. How many after "
         "two years?", "compound the growth factor once per year"),
    Kind("sequences", "A pattern starts at {a} and adds {b} each step. What is the tenth term?",
         "first term plus nine times the common difference"),
    Kind("volume", "A box is {a} centimetres on each side and holds cubes of side {b}. How many "
         "fit?", "divide each dimension before multiplying"),
)  # fmt: skip

PEOPLE = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kofi",
          "Lena", "Milo", "Nia", "Omar", "Priya")  # fmt: skip

# How a curator phrases a correct rule: each further rule for a kind is a new phrasing of the
# method with a different check, and adds a little (see `stream.SOLVER`).
LEADS = (
    "For {name} problems, {method}.",
    "When a question is about {name}, {method}, then check the units.",
    "{name} tip: {method}; estimate the answer first to catch slips.",
    "In {name} questions, {method} and write every intermediate step.",
)
WRONG = "For {name} problems, {method}."  # the method of another kind: a misleading rule
BIAS = "Most questions here are really {name} problems, so always start by trying to {method}."
SPECIFIC = "For the problem where {person} has {a} and {b}, the answer is {answer}."
